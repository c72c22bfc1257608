package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// frames is `fs write`'s stdin for data: one frame per chunk, then the commit frame unless cut.
func frames(data []byte, chunk int, commit bool) []byte {
	var b bytes.Buffer
	for len(data) > 0 {
		n := min(chunk, len(data))
		binary.Write(&b, binary.BigEndian, uint32(n))
		b.Write(data[:n])
		data = data[n:]
	}
	if commit {
		b.Write([]byte{0, 0, 0, 0})
	}
	return b.Bytes()
}

type fsRun struct {
	code           int
	stdout, stderr string
}

func runFsT(stdin []byte, args ...string) fsRun {
	var out, errb bytes.Buffer
	code := runFs(args, bytes.NewReader(stdin), &out, &errb)
	return fsRun{code, out.String(), errb.String()}
}

func errCode(t *testing.T, r fsRun) string {
	t.Helper()
	var fe fsError
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &fe); err != nil {
		t.Fatalf("stderr is not one JSON line: %q", r.stderr)
	}
	if fsExitCodes[fe.Code] != r.code {
		t.Fatalf("exit %d does not match code %s", r.code, fe.Code)
	}
	return fe.Code
}

func TestFsWriteReadStat(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "f.txt")
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	if r := runFsT(frames(data, 65536, true), "write", p, "640"); r.code != 0 {
		t.Fatalf("write: %+v", r)
	}
	r := runFsT(nil, "read", p)
	if r.code != 0 || r.stdout != `{"ok":true,"size":1000000}`+"\n"+string(data) {
		t.Fatalf("read: code %d, %d bytes, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	r = runFsT(nil, "stat", p)
	var st dirEntry
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.IsFile || st.Size != 1_000_000 || st.Mode != 0o640 || st.Name != "f.txt" {
		t.Fatalf("stat: %+v %v", st, err)
	}
	// Replacing keeps the mode; an uncommitted write (the host's source failed) changes nothing.
	if r := runFsT(frames([]byte("new"), 10, true), "write", p); r.code != 0 {
		t.Fatal(r)
	}
	if r := runFsT(frames([]byte("partial"), 3, false), "write", p); errCode(t, r) != "cancelled" {
		t.Fatal(r)
	}
	got, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(got) != "new" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("after replace: %q %o", got, fi.Mode().Perm())
	}
	list, _ := os.ReadDir(filepath.Dir(p))
	if len(list) != 1 {
		t.Fatalf("a temp file was left: %v", list)
	}
}

func TestFsErrors(t *testing.T) {
	dir := t.TempDir()
	if r := runFsT(nil, "read", filepath.Join(dir, "missing")); errCode(t, r) != "not_found" {
		t.Fatal(r)
	}
	if r := runFsT(nil, "read", dir); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
	if r := runFsT(nil, "stat", "relative/path"); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
	if r := runFsT(nil, "stat", dir+"/../x"); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	if r := runFsT(nil, "mkdir", filepath.Join(dir, "file")); errCode(t, r) != "conflict" {
		t.Fatal(r)
	}
	if r := runFsT(nil, "mkdir", filepath.Join(dir, "file", "sub")); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
	if r := runFsT(frames([]byte("x"), 1, true), "write", dir); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
	os.MkdirAll(filepath.Join(dir, "full", "x"), 0o755)
	if r := runFsT(nil, "rm", filepath.Join(dir, "full")); errCode(t, r) != "conflict" {
		t.Fatal(r)
	}
	if r := runFsT(nil, "nope", dir); r.code != 2 {
		t.Fatal(r)
	}
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked")
		os.Mkdir(locked, 0o500)
		if r := runFsT(frames([]byte("x"), 1, true), "write", filepath.Join(locked, "f")); errCode(t, r) != "forbidden" {
			t.Fatal(r)
		}
	}
}

func TestFsListMkdirRemoveRename(t *testing.T) {
	dir := t.TempDir()
	if r := runFsT(nil, "mkdir", filepath.Join(dir, "a", "b"), "750"); r.code != 0 {
		t.Fatal(r)
	}
	os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("12345"), 0o644)
	os.Symlink("/etc", filepath.Join(dir, "a", "link"))
	r := runFsT(nil, "ls", dir, "--recursive")
	var entries []dirEntry
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatal(r, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "a,a/b,a/b/f,a/link" || entries[1].Mode != 0o750 || !entries[3].IsSymlink {
		t.Fatalf("ls: %+v", entries)
	}
	r = runFsT(nil, "ls", filepath.Join(dir, "a"))
	json.Unmarshal([]byte(r.stdout), &entries)
	if len(entries) != 2 {
		t.Fatalf("ls: %+v", entries)
	}
	if r := runFsT(nil, "mv", filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "c", "g")); r.code != 0 {
		t.Fatal(r)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "c", "g")); string(got) != "12345" {
		t.Fatalf("mv: %q", got)
	}
	if r := runFsT(nil, "rm", filepath.Join(dir, "a", "link")); r.code != 0 {
		t.Fatal(r)
	}
	if _, err := os.Stat("/etc"); err != nil {
		t.Fatal("rm followed the link")
	}
	if r := runFsT(nil, "rm", filepath.Join(dir, "a"), "--recursive"); r.code != 0 {
		t.Fatal(r)
	}
	if r := runFsT(nil, "rm", filepath.Join(dir, "a"), "--recursive"); r.code != 0 {
		t.Fatal("removeAll of a missing path must succeed", r)
	}
	if r := runFsT(nil, "rm", "/"); errCode(t, r) != "invalid_argument" {
		t.Fatal(r)
	}
}

func TestFsWatch(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	go fsWatch(dir, true, pw)
	lines := bufio.NewScanner(pr)
	next := func() watchEvent {
		t.Helper()
		got := make(chan watchEvent, 1)
		go func() {
			var e watchEvent
			if lines.Scan() {
				json.Unmarshal(lines.Bytes(), &e)
			}
			got <- e
		}()
		select {
		case e := <-got:
			return e
		case <-time.After(5 * time.Second):
			t.Fatal("no event in 5 s")
			return watchEvent{}
		}
	}
	if e := next(); e.Type != "ready" {
		t.Fatalf("first line %+v", e)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if e := next(); e != (watchEvent{Type: "create", Name: "sub", IsDir: true}) {
		t.Fatalf("%+v", e)
	}
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644)
	if e := next(); e != (watchEvent{Type: "create", Name: "sub/f"}) {
		t.Fatalf("%+v", e)
	}
	if e := next(); e != (watchEvent{Type: "write", Name: "sub/f"}) {
		t.Fatalf("%+v", e)
	}
	// `fs write` shows as the real name created and written, its temp file not at all.
	if r := runFsT(frames([]byte("hello"), 5, true), "write", filepath.Join(dir, "w.txt")); r.code != 0 {
		t.Fatal(r)
	}
	if e := next(); e != (watchEvent{Type: "create", Name: "w.txt"}) {
		t.Fatalf("%+v", e)
	}
	if e := next(); e != (watchEvent{Type: "write", Name: "w.txt"}) {
		t.Fatalf("%+v", e)
	}
	os.Chmod(filepath.Join(dir, "w.txt"), 0o600)
	if e := next(); e != (watchEvent{Type: "chmod", Name: "w.txt"}) {
		t.Fatalf("%+v", e)
	}
	os.Rename(filepath.Join(dir, "w.txt"), filepath.Join(dir, "v.txt"))
	if e := next(); e != (watchEvent{Type: "rename", Name: "w.txt"}) {
		t.Fatalf("%+v", e)
	}
	if e := next(); e != (watchEvent{Type: "create", Name: "v.txt"}) {
		t.Fatalf("%+v", e)
	}
	os.Remove(filepath.Join(dir, "v.txt"))
	if e := next(); e != (watchEvent{Type: "remove", Name: "v.txt"}) {
		t.Fatalf("%+v", e)
	}
}

// A unix socket cannot be opened (ENXIO) and a FIFO must not block the open: both are refused as
// "not a regular file", never internal.
func TestFsReadSocketAndFifoRefused(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sock, fifo} {
		r := runFsT(nil, "read", p)
		if code := errCode(t, r); code != "invalid_argument" || !strings.Contains(r.stderr, "not a regular file") {
			t.Fatalf("%s: %s %q", p, code, r.stderr)
		}
	}
}
