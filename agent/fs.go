// The `fs` subcommand: one file operation in the box, run by the host through an ordinary exec
// (`/.sbx/sbx-agent fs <op> …` as the box user), so the kernel applies that user's permissions
// and the agent needs none of its own. It does its one operation and exits; PID 1 mode is the
// `init` subcommand and is untouched by this file. See docs/box-files.md.
//
//	fs read PATH                 {"ok":true,"size":N} and a newline, then the bytes, on stdout
//	fs write PATH [MODE]         stdin framed (4-byte big-endian length + bytes, length 0 = commit);
//	      [--owner=USER] [--meta=KEY=VALUE…]  hands the file and the directories made to USER,
//	                             sets user.e2b.KEY xattrs (fs_details.go)
//	fs stat PATH [--details]     a FileStat as JSON on stdout; --details: owner, group, symlink
//	                             target, metadata (fs_details.go)
//	fs ls PATH [--recursive] [--details]  a JSON array of DirEntry
//	fs mkdir PATH [MODE]         mkdir -p
//	fs rm PATH [--recursive]     a file, symlink or empty directory; --recursive: rm -rf, missing is fine
//	fs mv FROM TO                rename(2), creating TO's parent directories
//	fs watch PATH [--recursive]  inotify events as JSON lines on stdout until killed
//	fs tar-out PATH              {"ok":true} and a newline, then a tar of directory PATH (fs_tar.go)
//	fs tar-in DEST               stdin framed as for write, a tar; {"entries":N,"bytes":N}
//	fs copy FROM TO              a directory tree or a symlink, merged into TO
//
// Errors: one JSON line {"code","errno","message","path"} on stderr and the exit code of the
// code (fsExitCodes), so the host maps them to SbxError without parsing messages.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fsExitCodes: one exit code per error code; 2 stays the usage error of every subcommand.
var fsExitCodes = map[string]int{
	"not_found":        10,
	"forbidden":        11,
	"conflict":         12,
	"invalid_argument": 13,
	"quota_exceeded":   14,
	"internal":         15,
	"cancelled":        16,
}

// tempPrefix marks the temp files of `fs write`; the watcher hides them (see watchEvents).
const tempPrefix = ".sbx-tmp-"

const defaultFileMode = 0o644
const defaultDirMode = 0o755

type fsError struct {
	Code    string `json:"code"`
	Errno   string `json:"errno,omitempty"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

func (e *fsError) Error() string { return e.Message }

// errnoNames: the errno values the codes below are derived from, by their C names.
var errnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EACCES: "EACCES", syscall.EPERM: "EPERM", syscall.EEXIST: "EEXIST",
	syscall.ENOTEMPTY: "ENOTEMPTY", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.EINVAL: "EINVAL",
	syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT", syscall.EROFS: "EROFS", syscall.ELOOP: "ELOOP",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EXDEV: "EXDEV", syscall.EBUSY: "EBUSY", syscall.ETXTBSY: "ETXTBSY",
	syscall.ENXIO: "ENXIO",
}

// codeOfErrno is the stable code of an errno: what the caller can do about it, not how it happened.
func codeOfErrno(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "not_found"
	case syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ETXTBSY:
		return "forbidden"
	case syscall.EEXIST, syscall.ENOTEMPTY, syscall.EBUSY:
		return "conflict"
	case syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EXDEV, syscall.ENXIO:
		return "invalid_argument"
	case syscall.ENOSPC, syscall.EDQUOT:
		return "quota_exceeded"
	}
	return "internal"
}

// toFsError turns an error of an operation on path into an fsError with a stable code.
func toFsError(err error, op, path string) *fsError {
	var fe *fsError
	if errors.As(err, &fe) {
		return fe
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		name := errnoNames[errno]
		if name == "" {
			name = "E" + strconv.Itoa(int(errno))
		}
		msg := fmt.Sprintf("cannot %s %s: %s", op, path, errno.Error())
		if errno == syscall.EXDEV {
			msg += " (a rename cannot cross filesystems)"
		}
		return &fsError{Code: codeOfErrno(errno), Errno: name, Message: msg, Path: path}
	}
	return &fsError{Code: "internal", Message: fmt.Sprintf("cannot %s %s: %v", op, path, err), Path: path}
}

func invalid(path, format string, a ...any) *fsError {
	return &fsError{Code: "invalid_argument", Message: fmt.Sprintf(format, a...), Path: path}
}

// runFs is `sbx-agent fs …`: the exit code of the process.
func runFs(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Modes given by the caller are applied exactly, as the workspace API does.
	syscall.Umask(0)
	err := fsDispatch(args, stdin, stdout, stderr)
	if err == nil {
		return 0
	}
	fe := toFsError(err, "use", "")
	if fe.Code == "usage" {
		fmt.Fprintln(stderr, fe.Message)
		return 2
	}
	line, _ := json.Marshal(fe)
	fmt.Fprintf(stderr, "%s\n", line)
	return fsExitCodes[fe.Code]
}

const fsUsage = "usage: sbx-agent fs read|write|stat|ls|mkdir|rm|mv|watch|tar-out|tar-in|copy PATH [ARG] [--recursive]"

func fsDispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	recursive, details := false, false
	var pos, metaArgs []string
	owner := ""
	for _, a := range args {
		switch {
		case a == "--recursive":
			recursive = true
		case a == "--details":
			details = true
		case strings.HasPrefix(a, "--owner="):
			owner = strings.TrimPrefix(a, "--owner=")
		case strings.HasPrefix(a, "--meta="):
			metaArgs = append(metaArgs, a)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) < 2 {
		return &fsError{Code: "usage", Message: fsUsage}
	}
	op, path := pos[0], pos[1]
	if err := checkPath(path); err != nil {
		return err
	}
	mode := func(def uint32) (uint32, error) {
		if len(pos) < 3 {
			return def, nil
		}
		m, err := strconv.ParseUint(pos[2], 8, 32)
		if err != nil || m > 0o7777 {
			return 0, invalid(path, "mode: %q is not an octal permission mode", pos[2])
		}
		return uint32(m) & 0o777, nil
	}
	switch op {
	case "read":
		return fsRead(path, stdout)
	case "write":
		m, err := mode(0)
		if err != nil {
			return err
		}
		var o *writeOwner
		if owner != "" {
			if o, err = parseOwner(owner); err != nil {
				return err
			}
		}
		meta, err := parseMeta(metaArgs)
		if err != nil {
			return err
		}
		return fsWrite(path, m, len(pos) >= 3, stdin, o, meta)
	case "stat":
		if details {
			st, err := statDetailed(path)
			if err != nil {
				return toFsError(err, "stat", path)
			}
			return writeJSON(stdout, st)
		}
		st, err := statEntry(path, baseName(path))
		if err != nil {
			return toFsError(err, "stat", path)
		}
		return writeJSON(stdout, st)
	case "ls":
		if details {
			entries, err := listDetailed(path, recursive)
			if err != nil {
				return err
			}
			return writeJSON(stdout, entries)
		}
		entries, err := fsList(path, recursive)
		if err != nil {
			return err
		}
		return writeJSON(stdout, entries)
	case "mkdir":
		m, err := mode(defaultDirMode)
		if err != nil {
			return err
		}
		return fsMkdir(path, m)
	case "rm":
		return fsRemove(path, recursive)
	case "mv":
		if len(pos) < 3 {
			return &fsError{Code: "usage", Message: fsUsage}
		}
		if err := checkPath(pos[2]); err != nil {
			return err
		}
		return fsRename(path, pos[2])
	case "watch":
		return fsWatch(path, recursive, stdout)
	case "tar-out":
		return fsTarOut(path, stdout)
	case "tar-in":
		return fsTarIn(path, stdin, stdout)
	case "copy":
		if len(pos) < 3 {
			return &fsError{Code: "usage", Message: fsUsage}
		}
		if err := checkPath(pos[2]); err != nil {
			return err
		}
		return fsCopy(path, pos[2])
	}
	return &fsError{Code: "usage", Message: fmt.Sprintf("sbx-agent fs: unknown operation %q\n%s", op, fsUsage)}
}

// checkPath: the host sends clean absolute paths; anything else is refused, never guessed at.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || filepath.Clean(p) != p {
		return invalid(p, "path: must be a clean absolute path, got %q", p)
	}
	return nil
}

func baseName(p string) string {
	if p == "/" {
		return "/"
	}
	return filepath.Base(p)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// dirEntry is the workspace API's DirEntry/FileStat (src/workspace/types.ts), field for field.
type dirEntry struct {
	Name      string `json:"name"`
	IsDir     bool   `json:"isDir"`
	IsFile    bool   `json:"isFile"`
	IsSymlink bool   `json:"isSymlink"`
	Size      int64  `json:"size"`
	Mode      uint32 `json:"mode"`
	Mtime     string `json:"mtime"`
}

func entryOf(name string, fi fs.FileInfo) dirEntry {
	m := fi.Mode()
	return dirEntry{
		Name:      name,
		IsDir:     m.IsDir(),
		IsFile:    m.IsRegular(),
		IsSymlink: m&fs.ModeSymlink != 0,
		Size:      fi.Size(),
		Mode:      uint32(m.Perm()),
		// As JavaScript's toISOString prints it (milliseconds, UTC).
		Mtime: fi.ModTime().UTC().Format("2006-01-02T15:04:05.000Z"),
	}
}

// statEntry describes path without following a final symlink (lstat), as the workspace API does.
func statEntry(path, name string) (dirEntry, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return dirEntry{}, err
	}
	return entryOf(name, fi), nil
}

func fsRead(path string, stdout io.Writer) error {
	// O_NONBLOCK: a FIFO must not hang the open; only regular files are read (as the workspace API).
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ENXIO) {
		// open(2) of a unix socket (or a device without its driver) fails before fstat can tell.
		return &fsError{Code: "invalid_argument", Errno: "ENXIO", Message: fmt.Sprintf("cannot read %s: not a regular file (a socket or device)", path), Path: path}
	}
	if err != nil {
		return toFsError(err, "read", path)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return toFsError(err, "read", path)
	}
	if fi.IsDir() {
		return &fsError{Code: "invalid_argument", Errno: "EISDIR", Message: fmt.Sprintf("cannot read %s: it is a directory", path), Path: path}
	}
	if !fi.Mode().IsRegular() {
		return invalid(path, "cannot read %s: not a regular file", path)
	}
	// The host resolves createReadStream only after this line: open errors reject the call, not
	// the stream. On stdout, before the bytes: one ordered stream (a header on stderr could be
	// held up behind a full stdout on the host).
	if err := writeJSON(stdout, map[string]any{"ok": true, "size": fi.Size()}); err != nil {
		return err
	}
	if _, err := io.CopyBuffer(stdout, f, make([]byte, 256*1024)); err != nil {
		return toFsError(err, "read", path)
	}
	return nil
}

// fsWrite streams stdin into a temp file beside path and renames it in: readers see the old
// file or the new one, never a part. The content arrives framed, and only the zero-length frame
// commits; a stdin that ends without it (the host's source failed) leaves the old file alone.
//
// With an owner (envd's writes, run as root): missing parents are made one by one and handed to
// the owner, and so is the file, new or replaced, as E2B's envd does; meta becomes the file's
// `user.e2b.*` extended attributes. The walk to the directory follows only root's symlinks: root
// writes where the box user could not through a link of theirs (openWriteDir).
func fsWrite(path string, mode uint32, modeGiven bool, stdin io.Reader, owner *writeOwner, meta map[string]string) error {
	if path == "/" {
		return invalid(path, "path: cannot write the root directory")
	}
	// Everything below acts on the directory's fd: with an owner the walk to it followed no
	// symlink of the box user's (openWriteDir), and nothing after may resolve the path again.
	dirfd, err := openWriteDir(filepath.Dir(path), owner)
	if err != nil {
		return toFsError(err, "write", path)
	}
	defer syscall.Close(dirfd)
	name := filepath.Base(path)
	existing, err := lstatAt(dirfd, name)
	switch {
	case err == nil && existing.IsDir():
		return &fsError{Code: "invalid_argument", Errno: "EISDIR", Message: fmt.Sprintf("cannot write %s: it is a directory", path), Path: path}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return toFsError(err, "write", path)
	}
	replaced := err == nil && existing.Mode().IsRegular()
	if !modeGiven {
		mode = defaultFileMode
		if replaced {
			mode = uint32(existing.Mode().Perm())
		}
	}
	tmp := tempPrefix + randomHex(8)
	fd, err := syscall.Openat(dirfd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return toFsError(err, "write", path)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(filepath.Dir(path), tmp))
	committed := false
	defer func() {
		if !committed {
			f.Close()
			_ = syscall.Unlinkat(dirfd, tmp)
		}
	}()
	if err := copyFrames(f, bufio.NewReaderSize(stdin, 256*1024)); err != nil {
		return toFsError(err, "write", path)
	}
	// Mode, metadata and owner through the fd: by name, a swap of the temp file (its directory
	// may be the box user's) would redirect them.
	if err := f.Chmod(os.FileMode(mode)); err != nil {
		return toFsError(err, "write", path)
	}
	if err := writeMeta(f, meta); err != nil {
		return toFsError(err, "write", path)
	}
	if owner != nil {
		if err := owner.fchown(int(f.Fd())); err != nil {
			return toFsError(err, "write", path)
		}
	} else if replaced && os.Geteuid() == 0 {
		// root replacing someone's file keeps its owner, so the box user can still edit it.
		if st, ok := existing.Sys().(*syscall.Stat_t); ok {
			_ = f.Chown(int(st.Uid), int(st.Gid))
		}
	}
	if err := f.Sync(); err != nil {
		return toFsError(err, "write", path)
	}
	if err := f.Close(); err != nil {
		return toFsError(err, "write", path)
	}
	if err := syscall.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return toFsError(err, "write", path)
	}
	committed = true
	_ = syscall.Fsync(dirfd)
	return nil
}

// maxWriteFrame bounds one frame of `fs write`'s stdin (the host sends at most 256 KiB).
const maxWriteFrame = 16 << 20

func copyFrames(w io.Writer, r io.Reader) error {
	var hdr [4]byte
	buf := make([]byte, 256*1024)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return &fsError{Code: "cancelled", Message: "write cancelled: the content ended before it was complete"}
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 {
			return nil
		}
		if n > maxWriteFrame {
			return &fsError{Code: "invalid_argument", Message: fmt.Sprintf("write: frame of %d bytes is too large", n)}
		}
		for n > 0 {
			chunk := buf
			if n < len(chunk) {
				chunk = chunk[:n]
			}
			if _, err := io.ReadFull(r, chunk); err != nil {
				return &fsError{Code: "cancelled", Message: "write cancelled: the content ended before it was complete"}
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			n -= len(chunk)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b)
}

// fsList: the entries of a directory by name; with recursive, every entry below it, names
// relative to path, never descending through a symlink; unreadable subdirectories are listed
// but not entered (a user listing / recursively must not fail on /root).
func fsList(path string, recursive bool) ([]dirEntry, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, toFsError(err, "list", path)
	}
	if !fi.IsDir() {
		return nil, &fsError{Code: "invalid_argument", Errno: "ENOTDIR", Message: fmt.Sprintf("cannot list %s: not a directory", path), Path: path}
	}
	entries := []dirEntry{}
	var walk func(dir, prefix string, top bool) error
	walk = func(dir, prefix string, top bool) error {
		list, err := os.ReadDir(dir)
		if err != nil {
			if top {
				return toFsError(err, "list", path)
			}
			return nil
		}
		for _, d := range list {
			info, err := d.Info()
			if err != nil {
				continue // gone since the listing
			}
			name := prefix + d.Name()
			entries = append(entries, entryOf(name, info))
			if recursive && info.IsDir() {
				if err := walk(filepath.Join(dir, d.Name()), name+"/", false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(path, "", true); err != nil {
		return nil, err
	}
	return entries, nil
}

// fsMkdir is `mkdir -p`: an existing directory is fine, an existing non-directory a conflict.
func fsMkdir(path string, mode uint32) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fsError{Code: "conflict", Errno: "EEXIST", Message: fmt.Sprintf("cannot create directory %s: it exists and is not a directory", path), Path: path}
	}
	if err := os.MkdirAll(path, os.FileMode(mode)); err != nil {
		return toFsError(err, "create directory", path)
	}
	return nil
}

func fsRemove(path string, recursive bool) error {
	if path == "/" {
		return invalid(path, "path: the root directory cannot be removed")
	}
	if recursive {
		// RemoveAll never follows symlinks and takes a missing path as done.
		if err := os.RemoveAll(path); err != nil {
			return toFsError(err, "remove", path)
		}
		return nil
	}
	err := syscall.Unlink(path)
	if err == syscall.EISDIR {
		err = syscall.Rmdir(path)
	}
	if err != nil {
		fe := toFsError(err, "remove", path)
		if err == syscall.ENOTEMPTY || err == syscall.EEXIST {
			fe.Message += " (directory not empty: use removeAll)"
		}
		return fe
	}
	return nil
}

func fsRename(from, to string) error {
	if from == "/" || to == "/" {
		return invalid("/", "path: the root directory cannot be renamed")
	}
	if _, err := os.Lstat(from); err != nil {
		return toFsError(err, "rename", from)
	}
	if err := os.MkdirAll(filepath.Dir(to), defaultDirMode); err != nil {
		return toFsError(err, "rename", to)
	}
	if err := os.Rename(from, to); err != nil {
		return toFsError(err, "rename", from)
	}
	return nil
}
