// Root writes on a user's behalf (`fs write --owner=USER`, envd's uploads): the directory is
// reached one component at a time through directory fds, so a symlink the box user planted
// (`~/out -> /etc`) cannot send root's write, its new directories or its chown elsewhere.
// Path-based calls (stat, mkdir, rename, chown, setxattr by name) would follow such a link, or
// a swap made between the check and the use; only *at calls on fds held open are safe.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

// The same on amd64 and arm64; Go's syscall package exports neither for amd64.
const (
	oPath       = 0x200000 // O_PATH
	atEmptyPath = 0x1000   // AT_EMPTY_PATH
)

// maxWalkLinks bounds the symlinks one walk follows (the kernel's own limit, past it ELOOP).
const maxWalkLinks = 40

// openWriteDir opens dir for fsWrite and returns its fd. Without an owner (the caller's own
// write, with the kernel's checks) it is `mkdir -p` and open, symlinks followed as always.
//
// With an owner (a write by root for that user) it walks from `/`: each component is opened
// with O_NOFOLLOW relative to the one before; a missing one is made (0755) and handed to the
// owner through its fd; a symlink is followed only if root owns it (`/bin -> usr/bin`, the
// image's own links: the box user cannot make one), an absolute target from `/`, a relative one
// from where it sits; any other symlink refuses the write (forbidden, EACCES).
func openWriteDir(dir string, owner *writeOwner) (int, error) {
	if owner == nil {
		if err := os.MkdirAll(dir, defaultDirMode); err != nil {
			return -1, err
		}
		return syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	}
	fd, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	// at: the path of fd, for messages; rest: the components still to walk.
	at := "/"
	rest := splitPath(dir)
	links, retries := 0, 0
	for len(rest) > 0 {
		c := rest[0]
		if c == "" || c == "." {
			rest = rest[1:]
			continue
		}
		next := filepath.Join(at, c)
		nfd, err := syscall.Openat(fd, c, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		switch {
		case err == nil:
			rest = rest[1:]
		case err == syscall.ENOENT:
			nfd, err = makeOwnedDir(fd, c, owner)
			if err == syscall.EEXIST && retries < maxWalkLinks {
				retries++ // made by someone else meanwhile: look again
				continue
			}
			if err != nil {
				syscall.Close(fd)
				return -1, err
			}
			rest = rest[1:]
		case err == syscall.ELOOP || err == syscall.ENOTDIR:
			// A symlink (O_NOFOLLOW) or not a directory at all: tell them apart on the entry itself.
			target, lerr := rootLinkTarget(fd, c, next)
			if lerr != nil {
				syscall.Close(fd)
				if lerr == syscall.ENOTDIR {
					return -1, &fsError{Code: "conflict", Errno: "ENOTDIR", Message: "cannot create directory " + dir + ": " + next + " is not a directory", Path: next}
				}
				return -1, lerr
			}
			if links++; links > maxWalkLinks {
				syscall.Close(fd)
				return -1, &fsError{Code: "invalid_argument", Errno: "ELOOP", Message: "cannot write in " + dir + ": too many levels of symbolic links", Path: dir}
			}
			rest = append(splitPath(target), rest[1:]...)
			if strings.HasPrefix(target, "/") {
				if nfd, err = syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err != nil {
					syscall.Close(fd)
					return -1, err
				}
				syscall.Close(fd)
				fd, at = nfd, "/"
			}
			continue
		default:
			syscall.Close(fd)
			return -1, err
		}
		syscall.Close(fd)
		fd, at = nfd, next
	}
	return fd, nil
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

// makeOwnedDir creates name in dirfd (0755), opens it without following a link and hands it to
// the owner through that fd. Only a directory root owns is handed over: if the box user swapped
// in one of theirs between the mkdir and the open, it is left as it is.
func makeOwnedDir(dirfd int, name string, owner *writeOwner) (int, error) {
	if err := syscall.Mkdirat(dirfd, name, defaultDirMode); err != nil {
		return -1, err
	}
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	if int(st.Uid) == os.Geteuid() {
		if err := owner.fchown(fd); err != nil {
			syscall.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// rootLinkTarget: the target of the symlink name in dirfd if root owns it. Another's symlink is
// refused (EACCES); an entry that is no symlink is ENOTDIR. The owner is checked and the target
// read on the same fd of the link itself (O_PATH|O_NOFOLLOW), so a swap between them changes nothing.
func rootLinkTarget(dirfd int, name, path string) (string, error) {
	fd, err := syscall.Openat(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", syscall.ENOTDIR
	}
	if st.Uid != 0 {
		return "", &fsError{Code: "forbidden", Errno: "EACCES", Message: fmt.Sprintf("permission denied: %s is a symbolic link owned by uid %d (a write as root follows only root's symlinks)", path, st.Uid), Path: path}
	}
	return readlinkFd(fd)
}

// readlinkFd is readlinkat(fd, "") of an O_PATH fd of a symlink.
func readlinkFd(fd int) (string, error) {
	empty, _ := syscall.BytePtrFromString("")
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(fd), uintptr(unsafe.Pointer(empty)), uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 0, 0)
		if e != 0 {
			return "", e
		}
		if int(n) < size {
			return string(buf[:n]), nil
		}
	}
}

// fchown hands the open file or directory fd to the owner; as chown, EPERM (a root without
// CAP_CHOWN) leaves it the writer's.
func (o *writeOwner) fchown(fd int) error {
	if o == nil {
		return nil
	}
	if err := syscall.Fchown(fd, o.uid, o.gid); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return nil
}

// lstatAt describes name in dirfd without following a symlink (fstatat AT_SYMLINK_NOFOLLOW,
// through an O_PATH fd: the syscall's name differs between amd64 and arm64).
func lstatAt(dirfd int, name string) (fs.FileInfo, error) {
	fd, err := syscall.Openat(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.Stat()
}

func fsetxattr(fd int, name string, value []byte) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	var v unsafe.Pointer
	if len(value) > 0 {
		v = unsafe.Pointer(&value[0])
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_FSETXATTR, uintptr(fd), uintptr(unsafe.Pointer(p)), uintptr(v), uintptr(len(value)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// llistxattr and lgetxattr act on a symlink itself, not on what it points at.
func llistxattr(path string, dest []byte) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return 0, err
	}
	var d unsafe.Pointer
	if len(dest) > 0 {
		d = unsafe.Pointer(&dest[0])
	}
	n, _, e := syscall.Syscall6(syscall.SYS_LLISTXATTR, uintptr(unsafe.Pointer(p)), uintptr(d), uintptr(len(dest)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func lgetxattr(path, name string, dest []byte) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return 0, err
	}
	a, err := syscall.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var d unsafe.Pointer
	if len(dest) > 0 {
		d = unsafe.Pointer(&dest[0])
	}
	n, _, e := syscall.Syscall6(syscall.SYS_LGETXATTR, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(a)), uintptr(d), uintptr(len(dest)), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
