package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The box user of these tests: an owner that is not root, as envd's writes have.
const walkUID = 1000

// rootWriteTree is a box in miniature: a root-only directory standing for /etc (with a passwd
// in it) and a home owned by the user.
func rootWriteTree(t *testing.T) (etc, home string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root writes for another user need root")
	}
	dir := t.TempDir()
	etc, home = filepath.Join(dir, "etc"), filepath.Join(dir, "home")
	os.Mkdir(etc, 0o700)
	os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0\n"), 0o644)
	os.Mkdir(home, 0o755)
	os.Chown(home, walkUID, walkUID)
	return etc, home
}

func writeAs(path string, meta ...string) fsRun {
	args := []string{"write", path, "--owner=" + "1000:1000"}
	for _, m := range meta {
		args = append(args, "--meta="+m)
	}
	return runFsT(frames([]byte("x"), 1, true), args...)
}

func ownerOf(t *testing.T, path string) (uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode()
}

func TestRootWriteRefusesTheUsersSymlinks(t *testing.T) {
	etc, home := rootWriteTree(t)
	out := filepath.Join(home, "out")
	os.Symlink(etc, out)
	os.Lchown(out, walkUID, walkUID)
	for _, p := range []string{filepath.Join(out, "passwd"), filepath.Join(out, "new", "x")} {
		r := writeAs(p)
		if errCode(t, r) != "forbidden" || !strings.Contains(r.stderr, "symbolic link owned by uid 1000") || !strings.Contains(r.stderr, `"errno":"EACCES"`) {
			t.Fatalf("write %s: %+v", p, r)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(etc, "passwd")); string(got) != "root:x:0:0\n" {
		t.Fatalf("passwd was replaced: %q", got)
	}
	if uid, _ := ownerOf(t, filepath.Join(etc, "passwd")); uid != 0 {
		t.Fatalf("passwd now belongs to %d", uid)
	}
	if list, _ := os.ReadDir(etc); len(list) != 1 {
		t.Fatalf("something was made in the target: %v", list)
	}
	// A relative link of the user's, deeper down, is refused as well.
	os.Mkdir(filepath.Join(home, "d"), 0o755)
	rel := filepath.Join(home, "d", "up")
	os.Symlink("../../etc", rel)
	os.Lchown(rel, walkUID, walkUID)
	if r := writeAs(filepath.Join(rel, "passwd")); errCode(t, r) != "forbidden" {
		t.Fatal(r)
	}
	// The plain write (the caller's own, with the kernel's checks) follows links as before.
	if r := runFsT(frames([]byte("y"), 1, true), "write", filepath.Join(out, "plain")); r.code != 0 {
		t.Fatal(r)
	}
	if got, _ := os.ReadFile(filepath.Join(etc, "plain")); string(got) != "y" {
		t.Fatalf("plain write through the link: %q", got)
	}
}

func TestRootWriteFollowsRootsSymlinks(t *testing.T) {
	etc, home := rootWriteTree(t)
	// As /bin -> usr/bin: made by root, absolute and relative, one through the other.
	os.Symlink(etc, filepath.Join(home, "abs"))
	os.Symlink("abs", filepath.Join(home, "rel"))
	p := filepath.Join(home, "rel", "new", "f")
	if r := writeAs(p, "k=v"); r.code != 0 {
		t.Fatal(r)
	}
	target := filepath.Join(etc, "new", "f")
	if got, _ := os.ReadFile(target); string(got) != "x" {
		t.Fatalf("through root's links: %q", got)
	}
	for _, q := range []string{filepath.Join(etc, "new"), target} {
		if uid, _ := ownerOf(t, q); uid != walkUID {
			t.Fatalf("%s belongs to %d", q, uid)
		}
	}
	if m := readMeta(target); m["k"] != "v" {
		t.Fatalf("metadata: %v", m)
	}
	// A loop of root's links ends in ELOOP, not a hang.
	os.Symlink("b", filepath.Join(home, "a"))
	os.Symlink("a", filepath.Join(home, "b"))
	if r := writeAs(filepath.Join(home, "a", "f")); errCode(t, r) != "invalid_argument" || !strings.Contains(r.stderr, "ELOOP") {
		t.Fatal(r)
	}
}

func TestRootWriteMakesParentsForTheOwner(t *testing.T) {
	_, home := rootWriteTree(t)
	p := filepath.Join(home, "a", "b", "f")
	if r := writeAs(p); r.code != 0 {
		t.Fatal(r)
	}
	for _, q := range []string{filepath.Join(home, "a"), filepath.Join(home, "a", "b"), p} {
		uid, mode := ownerOf(t, q)
		if uid != walkUID || (mode.IsDir() && mode.Perm() != 0o755) {
			t.Fatalf("%s: uid %d mode %v", q, uid, mode)
		}
	}
	// A file where a directory should be is a conflict, as before.
	if r := writeAs(filepath.Join(p, "g")); errCode(t, r) != "conflict" {
		t.Fatal(r)
	}
	// The file itself may be the user's symlink: it is replaced, what it points at is untouched.
	secret := filepath.Join(home, "..", "etc", "passwd")
	link := filepath.Join(home, "link")
	os.Symlink(secret, link)
	os.Lchown(link, walkUID, walkUID)
	if r := writeAs(link); r.code != 0 {
		t.Fatal(r)
	}
	if got, _ := os.ReadFile(secret); string(got) != "root:x:0:0\n" {
		t.Fatalf("the link's target was written: %q", got)
	}
	if _, mode := ownerOf(t, link); !mode.IsRegular() {
		t.Fatalf("the link was not replaced: %v", mode)
	}
}

// readMeta describes a symlink itself, not what it points at (as stat --details says).
func TestReadMetaDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	os.WriteFile(f, nil, 0o644)
	if err := syscall.Setxattr(f, "user.e2b.k", []byte("v"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	if m := readMeta(f); m["k"] != "v" {
		t.Fatalf("file: %v", m)
	}
	link := filepath.Join(dir, "l")
	os.Symlink(f, link)
	if m := readMeta(link); m != nil {
		t.Fatalf("the link reported its target's metadata: %v", m)
	}
}
