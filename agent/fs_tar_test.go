package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

type tarItem struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func makeTar(t *testing.T, items ...tarItem) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, it := range items {
		mode := it.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: it.name, Linkname: it.link, Typeflag: it.typ, Mode: mode, Size: int64(len(it.body)), ModTime: time.Unix(1_700_000_000, 0)}
		if it.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if it.typ == tar.TypeReg {
			tw.Write([]byte(it.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// treeOf lists everything below dir: name -> kind and content (symlinks by target).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		case fi.IsDir():
			out[rel] = "dir " + fi.Mode().Perm().String()
		default:
			data, _ := os.ReadFile(p)
			out[rel] = fi.Mode().Perm().String() + " " + string(data)
		}
		return nil
	})
	return out
}

func TestFsTarOutInRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub", "empty"), 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o640)
	os.WriteFile(filepath.Join(src, "sub", "b.sh"), []byte("#!/bin/sh\n"), 0o750)
	long := strings.Repeat("d", 90) + "/" + strings.Repeat("n", 120) + ".txt"
	os.MkdirAll(filepath.Join(src, filepath.Dir(long)), 0o755)
	os.WriteFile(filepath.Join(src, long), []byte("long"), 0o644)
	os.Symlink("../a.txt", filepath.Join(src, "sub", "inside"))
	os.Symlink("/etc/passwd", filepath.Join(src, "outside"))
	os.Symlink("../../x", filepath.Join(src, "sub", "climbs"))

	r := runFsT(nil, "tar-out", src)
	if r.code != 0 {
		t.Fatalf("tar-out: %d %s", r.code, r.stderr)
	}
	header, archive, _ := strings.Cut(r.stdout, "\n")
	if header != `{"ok":true}` {
		t.Fatalf("header line %q", header)
	}
	tr := tar.NewReader(strings.NewReader(archive))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "a.txt" && (h.Mode != 0o640 || h.ModTime.IsZero()) {
			t.Fatalf("a.txt header: mode %o mtime %v", h.Mode, h.ModTime)
		}
		if h.Name == "sub/inside" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "../a.txt") {
			t.Fatalf("the symlink is stored as a symlink: %+v", h)
		}
	}
	want := []string{"a.txt", strings.Repeat("d", 90) + "/", long, "sub/", "sub/b.sh", "sub/empty/", "sub/inside"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("names (depth-first, sorted, symlinks leaving the tree left out):\n got %v\nwant %v", names, want)
	}

	dest := filepath.Join(dir, "ws", "restored")
	r = runFsT(frames([]byte(archive), 700, true), "tar-in", dest)
	if r.code != 0 {
		t.Fatalf("tar-in: %d %s", r.code, r.stderr)
	}
	var res importResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Entries != 7 || res.Bytes != int64(len("hello")+len("#!/bin/sh\n")+len("long")) {
		t.Fatalf("result %q", r.stdout)
	}
	got := treeOf(t, dest)
	if got["a.txt"] != "-rw-r----- hello" || got["sub/b.sh"] != "-rwxr-x--- #!/bin/sh\n" || got["sub/inside"] != "-> ../a.txt" || got[long] != "-rw-r--r-- long" || got["sub/empty"] == "" {
		t.Fatalf("restored tree: %v", got)
	}
	if fi, _ := os.Stat(filepath.Join(dest, "a.txt")); fi == nil || fi.ModTime().Unix() != mustStat(t, filepath.Join(src, "a.txt")).ModTime().Unix() {
		t.Fatal("mtime not kept")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "ws", tempPrefix+"*")); len(left) != 0 {
		t.Fatalf("staging left behind: %v", left)
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func TestFsTarOutRefusals(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "real"), 0o755)
	os.Symlink("real", filepath.Join(dir, "link"))
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	for _, c := range []struct{ path, code string }{
		{filepath.Join(dir, "link"), "invalid_argument"},
		{filepath.Join(dir, "f"), "invalid_argument"},
		{filepath.Join(dir, "missing"), "not_found"},
	} {
		if r := runFsT(nil, "tar-out", c.path); r.code == 0 || errCode(t, r) != c.code || r.stdout != "" {
			t.Fatalf("tar-out %s: %+v, want %s", c.path, r, c.code)
		}
	}
}

func TestFsTarInRefusals(t *testing.T) {
	for _, c := range []struct {
		what  string
		items []tarItem
	}{
		{"a name with ..", []tarItem{{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "../escape.txt", typ: tar.TypeReg, body: "x"}}},
		{"a name climbing out later", []tarItem{{name: "a/../../escape.txt", typ: tar.TypeReg, body: "x"}}},
		{"an absolute name", []tarItem{{name: "/tmp/abs.txt", typ: tar.TypeReg, body: "x"}}},
		{"a backslash", []tarItem{{name: `a\b`, typ: tar.TypeReg, body: "x"}}},
		{"a symlink to an absolute target", []tarItem{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}},
		{"a symlink climbing out", []tarItem{{name: "d/l", typ: tar.TypeSymlink, link: "../../outside"}}},
		{"a write through an archive symlink", []tarItem{{name: "d/", typ: tar.TypeDir}, {name: "l", typ: tar.TypeSymlink, link: "d"}, {name: "l/x.txt", typ: tar.TypeReg, body: "x"}}},
		{"a directory through an archive symlink", []tarItem{{name: "d/", typ: tar.TypeDir}, {name: "l", typ: tar.TypeSymlink, link: "d"}, {name: "l/sub/", typ: tar.TypeDir}}},
		{"a hard link to a later file", []tarItem{{name: "h", typ: tar.TypeLink, link: "later"}, {name: "later", typ: tar.TypeReg, body: "x"}}},
		{"a hard link outside", []tarItem{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}},
		{"a character device", []tarItem{{name: "null", typ: tar.TypeChar}}},
		{"a block device", []tarItem{{name: "sda", typ: tar.TypeBlock}}},
		{"a FIFO", []tarItem{{name: "pipe", typ: tar.TypeFifo}}},
	} {
		t.Run(c.what, func(t *testing.T) {
			dir := t.TempDir()
			ws := filepath.Join(dir, "ws")
			os.Mkdir(ws, 0o755)
			r := runFsT(frames(makeTar(t, c.items...), 512, true), "tar-in", filepath.Join(ws, "dest"))
			if r.code == 0 || errCode(t, r) != "invalid_argument" {
				t.Fatalf("%s: %+v", c.what, r)
			}
			if got := treeOf(t, dir); len(got) != 1 || got["ws"] == "" {
				t.Fatalf("%s: something was written: %v", c.what, got)
			}
		})
	}
}

func TestFsTarInDestinationAndSource(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(outside, 0o755)
	os.MkdirAll(ws, 0o755)
	os.Symlink(outside, filepath.Join(ws, "escape"))
	archive := makeTar(t, tarItem{name: "x.txt", typ: tar.TypeReg, body: "x"})

	// A destination through a symlink (planted by a box) is refused, not followed.
	for _, dest := range []string{filepath.Join(ws, "escape"), filepath.Join(ws, "escape", "sub")} {
		if r := runFsT(frames(archive, 512, true), "tar-in", dest); r.code == 0 || errCode(t, r) != "invalid_argument" {
			t.Fatalf("tar-in %s: %+v", dest, r)
		}
	}
	// An archive that ends without the commit frame (the host's source failed): nothing is written.
	if r := runFsT(frames(archive, 512, false), "tar-in", filepath.Join(ws, "cut")); r.code == 0 || errCode(t, r) != "cancelled" {
		t.Fatalf("uncommitted: %+v", r)
	}
	// Garbage is an unreadable archive.
	if r := runFsT(frames(bytes.Repeat([]byte("x"), 1024), 512, true), "tar-in", filepath.Join(ws, "bad")); r.code == 0 || errCode(t, r) != "invalid_argument" {
		t.Fatalf("garbage: %+v", r)
	}
	if got := treeOf(t, outside); len(got) != 0 {
		t.Fatalf("written outside: %v", got)
	}
	if got := treeOf(t, ws); len(got) != 1 {
		t.Fatalf("left in the workspace: %v", got)
	}

	// Merging: directories merge, files replace, a directory meeting a file is a conflict before anything moves.
	os.MkdirAll(filepath.Join(ws, "m", "keep"), 0o755)
	os.WriteFile(filepath.Join(ws, "m", "keep", "old.txt"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(ws, "m", "f"), []byte("file"), 0o644)
	merge := makeTar(t, tarItem{name: "keep/new.txt", typ: tar.TypeReg, body: "new"}, tarItem{name: "keep/old.txt", typ: tar.TypeReg, body: "replaced"}, tarItem{name: "h", typ: tar.TypeLink, link: "keep/new.txt"})
	if r := runFsT(frames(merge, 512, true), "tar-in", filepath.Join(ws, "m")); r.code != 0 {
		t.Fatalf("merge: %+v", r)
	}
	got := treeOf(t, filepath.Join(ws, "m"))
	if got["keep/new.txt"] != "-rw-r--r-- new" || got["keep/old.txt"] != "-rw-r--r-- replaced" || got["h"] != "-rw-r--r-- new" || got["f"] != "-rw-r--r-- file" {
		t.Fatalf("merged: %v", got)
	}
	clash := makeTar(t, tarItem{name: "new2.txt", typ: tar.TypeReg, body: "x"}, tarItem{name: "f/", typ: tar.TypeDir})
	if r := runFsT(frames(clash, 512, true), "tar-in", filepath.Join(ws, "m")); r.code == 0 || errCode(t, r) != "conflict" {
		t.Fatalf("clash: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(ws, "m", "new2.txt")); err == nil {
		t.Fatal("a refused merge moved something")
	}
}

func TestFsCopyTreeAndSymlink(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(filepath.Join(ws, "tpl", "sub"), 0o750)
	os.WriteFile(filepath.Join(ws, "tpl", "sub", "run.sh"), []byte("echo"), 0o700)
	os.Symlink("/etc/hosts", filepath.Join(ws, "tpl", "abs"))
	os.Symlink("sub/run.sh", filepath.Join(ws, "tpl", "rel"))

	if r := runFsT(nil, "copy", filepath.Join(ws, "tpl"), filepath.Join(ws, "out", "new")); r.code != 0 {
		t.Fatalf("copy: %+v", r)
	}
	got := treeOf(t, filepath.Join(ws, "out", "new"))
	want := map[string]string{"sub": "dir -rwxr-x---", "sub/run.sh": "-rwx------ echo", "abs": "-> /etc/hosts", "rel": "-> sub/run.sh"}
	if !sameMap(got, want) {
		t.Fatalf("copied tree: %v", got)
	}
	// Into itself: the copy's own staging is not copied.
	if r := runFsT(nil, "copy", filepath.Join(ws, "tpl"), filepath.Join(ws, "tpl", "again")); r.code != 0 {
		t.Fatalf("copy into itself: %+v", r)
	}
	if got := treeOf(t, filepath.Join(ws, "tpl", "again")); !sameMap(got, want) {
		t.Fatalf("copied into itself: %v", got)
	}
	if r := runFsT(nil, "copy", filepath.Join(ws, "tpl", "rel"), filepath.Join(ws, "l2")); r.code != 0 {
		t.Fatalf("copy symlink: %+v", r)
	}
	if target, _ := os.Readlink(filepath.Join(ws, "l2")); target != "sub/run.sh" {
		t.Fatalf("symlink copy: %q", target)
	}
	os.Symlink(filepath.Join(dir), filepath.Join(ws, "up"))
	if r := runFsT(nil, "copy", filepath.Join(ws, "tpl"), filepath.Join(ws, "up", "stolen")); r.code == 0 || errCode(t, r) != "invalid_argument" {
		t.Fatalf("copy through a symlink: %+v", r)
	}
	if r := runFsT(nil, "copy", filepath.Join(ws, "up", "ws"), filepath.Join(ws, "x")); r.code == 0 || errCode(t, r) != "invalid_argument" {
		t.Fatalf("copy from through a symlink: %+v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(ws, "*", tempPrefix+"*")); len(left) != 0 {
		t.Fatalf("staging left: %v", left)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
