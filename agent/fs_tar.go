// The tree operations of `fs` (see fs.go): tar streams out and in, and copies of a tree or a
// symlink. They serve the workspaces reached through a helper container (Kubernetes pools,
// remote nodes: src/sandbox/workspace-volumes.ts), so they keep the host workspace API's
// format and policy (src/workspace/tar.ts): no path component of PATH/DEST, and no path of an
// archive entry, may go through a symlink; writes are built in a staging directory beside the
// destination and merged in only when complete, so a refused archive leaves nothing behind.
//
//	fs tar-out PATH     {"ok":true} and a newline, then a tar of the directory PATH on stdout
//	fs tar-in DEST      stdin framed as for write, a tar; {"entries":N,"bytes":N} on stdout
//	fs copy FROM TO     a directory tree or a symlink (as a symlink), merged into TO
package main

import (
	"archive/tar"
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The host API's lexical limits (src/workspace/workspace-path.ts).
const maxArchivePathBytes = 4096
const maxArchiveNameBytes = 255

// symlinkRefused: the host API's refusal of a path that goes through a symlink (fs-errors.ts).
func symlinkRefused(path, action string) *fsError {
	return &fsError{Code: "invalid_argument", Errno: "ELOOP", Message: fmt.Sprintf("cannot %s %s: it goes through a symbolic link; workspace file I/O never follows symlinks", action, path), Path: path}
}

// lstatNoSymlink lstats every component of the clean absolute path p: a symlink among them is
// refused; the result is the last component's info (a missing component: ENOENT, from where).
func lstatNoSymlink(p, action string) (fs.FileInfo, error) {
	at := "/"
	fi, err := os.Lstat(at)
	if err != nil {
		return nil, toFsError(err, action, p)
	}
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if part == "" {
			continue
		}
		if !fi.IsDir() {
			return nil, &fsError{Code: "invalid_argument", Errno: "ENOTDIR", Message: fmt.Sprintf("cannot %s %s: %s is not a directory", action, p, at), Path: p}
		}
		at = filepath.Join(at, part)
		if fi, err = os.Lstat(at); err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, symlinkRefused(p, action)
		}
	}
	return fi, nil
}

// nearestDir: the deepest existing ancestor of p (p itself included), a directory reached
// without a symlink. Staging goes there: on the destination's filesystem, and nothing is
// created before the staged tree is complete.
func nearestDir(p, action string) (string, error) {
	for at := p; ; at = filepath.Dir(at) {
		fi, err := lstatNoSymlink(at, action)
		if err == nil {
			if !fi.IsDir() {
				return "", &fsError{Code: "conflict", Errno: "EEXIST", Message: fmt.Sprintf("cannot %s %s: %s exists and is not a directory", action, p, at), Path: p}
			}
			return at, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || at == "/" {
			return "", toFsError(err, action, p)
		}
	}
}

// newStage makes a private staging directory in dir (the temp prefix hides it from watchers).
func newStage(dir, action, p string) (string, error) {
	stage := filepath.Join(dir, tempPrefix+randomHex(8))
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", toFsError(err, action, p)
	}
	return stage, nil
}

// ---- tar-out ----

// fsTarOut writes the tree below directory path as the host's packTree does: names relative to
// path, directories with a trailing slash, depth-first with names sorted, symlinks as symlinks
// only when their target stays inside the tree, devices/FIFOs/sockets left out, a file that
// shrinks while read padded with zeros and one that grows cut at its size when opened.
func fsTarOut(path string, stdout io.Writer) error {
	fi, err := lstatNoSymlink(path, "export")
	if err != nil {
		return toFsError(err, "export", path)
	}
	if !fi.IsDir() {
		return &fsError{Code: "invalid_argument", Errno: "ENOTDIR", Message: fmt.Sprintf("cannot export %s: not a directory", path), Path: path}
	}
	if err := writeJSON(stdout, map[string]any{"ok": true}); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(stdout, 256*1024)
	tw := tar.NewWriter(bw)
	if err := packDir(tw, path, nil); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func packDir(tw *tar.Writer, dir string, prefix []string) error {
	list, err := os.ReadDir(dir)
	if err != nil {
		return toFsError(err, "export", dir)
	}
	for _, d := range list {
		abs := filepath.Join(dir, d.Name())
		comps := append(append([]string{}, prefix...), d.Name())
		name := strings.Join(comps, "/")
		fi, err := os.Lstat(abs)
		if err != nil {
			continue // gone since the listing
		}
		// Whole seconds, cut as tar-stream's ustar headers cut them (Go's writer would round).
		hdr := &tar.Header{Name: name, Mode: int64(modeBits(fi)), ModTime: fi.ModTime().Truncate(time.Second)}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if err := packDir(tw, abs, comps); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(abs)
			if err != nil || !symlinkStaysInside(prefix, target) {
				continue
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := packFile(tw, abs, hdr); err != nil {
				return err
			}
		}
	}
	return nil
}

func packFile(tw *tar.Writer, abs string, hdr *tar.Header) error {
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil // swapped for something else since the listing: leave it out
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	hdr.Typeflag, hdr.Size, hdr.Mode, hdr.ModTime = tar.TypeReg, fi.Size(), int64(modeBits(fi)), fi.ModTime().Truncate(time.Second)
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, fi.Size()), make([]byte, 64*1024))
	if err != nil {
		return toFsError(err, "export", abs)
	}
	if n < fi.Size() {
		_, err = io.CopyN(tw, zeroReader{}, fi.Size()-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// modeBits: permission, setuid, setgid and sticky bits as stat(2) has them (the host's mode & 0o7777).
func modeBits(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	return uint32(fi.Mode().Perm())
}

// symlinkStaysInside: whether target, read relative to linkDir (components below a base),
// stays inside the base (src/workspace/workspace-path.ts, same rule).
func symlinkStaysInside(linkDir []string, target string) bool {
	if target == "" || strings.ContainsRune(target, 0) || strings.HasPrefix(target, "/") {
		return false
	}
	depth := len(linkDir)
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth == 0 {
				return false
			}
			depth--
		default:
			depth++
		}
	}
	return true
}

// ---- tar-in ----

// importResult is the workspace API's ImportResult.
type importResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// frameReader reads `fs write`'s framing as a stream: EOF only after the commit frame, so a
// source that failed on the host (stdin ended early) is `cancelled`, never a shorter archive.
type frameReader struct {
	r    io.Reader
	left int
	done bool
}

func (f *frameReader) Read(p []byte) (int, error) {
	for f.left == 0 {
		if f.done {
			return 0, io.EOF
		}
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			return 0, &fsError{Code: "cancelled", Message: "import cancelled: the archive ended before it was complete"}
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > maxWriteFrame {
			return 0, &fsError{Code: "invalid_argument", Message: fmt.Sprintf("import: frame of %d bytes is too large", n)}
		}
		f.left, f.done = n, n == 0
	}
	if len(p) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= n
	if err == io.EOF && f.left > 0 {
		return n, &fsError{Code: "cancelled", Message: "import cancelled: the archive ended before it was complete"}
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// parseArchivePath: an entry's name as components, by the host API's lexical rules
// (parseWorkspacePath): no NUL, no backslash, not absolute, `..` never above the root.
func parseArchivePath(input string) ([]string, error) {
	refuse := func(format string, a ...any) error { return invalid(input, "tar entry: "+format, a...) }
	switch {
	case strings.ContainsRune(input, 0):
		return nil, refuse("must not contain NUL bytes")
	case strings.ContainsRune(input, '\\'):
		return nil, refuse("backslashes are not allowed in workspace paths (got %q)", input)
	case strings.HasPrefix(input, "/"):
		return nil, refuse("must be relative to the workspace root, got absolute %q", input)
	case len(input) > maxArchivePathBytes:
		return nil, refuse("longer than %d bytes", maxArchivePathBytes)
	}
	var comps []string
	for _, part := range strings.Split(input, "/") {
		switch {
		case part == "" || part == ".":
		case part == "..":
			if len(comps) == 0 {
				return nil, refuse("%q leaves the workspace root", input)
			}
			comps = comps[:len(comps)-1]
		case len(part) > maxArchiveNameBytes:
			return nil, refuse("a name in %q is longer than %d bytes", input, maxArchiveNameBytes)
		default:
			comps = append(comps, part)
		}
	}
	return comps, nil
}

// stagedDir returns stage/comps as a directory, creating missing ones with mode; an existing
// symlink or non-directory among them is refused (never followed).
func stagedDir(stage string, comps []string, mode uint32, display, action string) (string, error) {
	at := stage
	for i, c := range comps {
		at = filepath.Join(at, c)
		fi, err := os.Lstat(at)
		if errors.Is(err, fs.ErrNotExist) {
			m := uint32(defaultDirMode)
			if i == len(comps)-1 {
				m = mode
			}
			if err := os.Mkdir(at, os.FileMode(m)); err != nil {
				return "", toFsError(err, action, display)
			}
			continue
		}
		if err != nil {
			return "", toFsError(err, action, display)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", symlinkRefused(display, action)
		}
		if !fi.IsDir() {
			return "", &fsError{Code: "invalid_argument", Errno: "ENOTDIR", Message: fmt.Sprintf("cannot %s %s: %s is not a directory", action, display, strings.Join(comps[:i+1], "/")), Path: display}
		}
	}
	return at, nil
}

// placeAtomic creates an entry under a temp name in dir (make) and renames it over name; an
// existing directory there is refused (as writeFileAtomic does).
func placeAtomic(dir, name, display, action string, make func(tmp string) error) error {
	final := filepath.Join(dir, name)
	if fi, err := os.Lstat(final); err == nil && fi.IsDir() {
		return &fsError{Code: "invalid_argument", Errno: "EISDIR", Message: fmt.Sprintf("cannot %s %s: it is a directory", action, display), Path: display}
	}
	tmp := filepath.Join(dir, tempPrefix+randomHex(8))
	if err := make(tmp); err != nil {
		os.Remove(tmp)
		return toFsError(err, action, display)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return toFsError(err, action, display)
	}
	return nil
}

func writeStagedFile(dir, name, display string, mode uint32, mtime time.Time, src io.Reader, action string) (int64, error) {
	var n int64
	err := placeAtomic(dir, name, display, action, func(tmp string) error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err = io.CopyBuffer(f, src, make([]byte, 256*1024)); err != nil {
			return err
		}
		if err := f.Chmod(os.FileMode(mode)); err != nil {
			return err
		}
		if !mtime.IsZero() {
			if err := os.Chtimes(tmp, mtime, mtime); err != nil {
				return err
			}
		}
		return f.Close()
	})
	return n, err
}

// extractInto extracts archive r into the empty directory stage with the host's importTar
// policy (src/workspace/tar.ts extractTar).
func extractInto(stage string, r io.Reader) (importResult, error) {
	var res importResult
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			var fe *fsError
			if errors.As(err, &fe) {
				return res, fe
			}
			return res, &fsError{Code: "invalid_argument", Message: fmt.Sprintf("tar: cannot read the archive: %v", err)}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // pax global headers are parsed away, not entries (as tar-stream does)
		}
		n, err := extractEntry(stage, hdr, tr)
		if err != nil {
			var fe *fsError
			if errors.As(err, &fe) {
				return res, fe
			}
			return res, &fsError{Code: "invalid_argument", Message: fmt.Sprintf("tar: cannot read the archive: %v", err)}
		}
		res.Bytes += n
		res.Entries++
	}
}

func extractEntry(stage string, hdr *tar.Header, content io.Reader) (int64, error) {
	comps, err := parseArchivePath(strings.TrimRight(hdr.Name, "/"))
	if err != nil {
		return 0, err
	}
	display := strings.Join(comps, "/")
	mode := uint32(hdr.Mode) & 0o777
	if len(comps) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return 0, nil // the archive's own root, "./"
		}
		return 0, invalid(hdr.Name, "tar entry %q has no name", hdr.Name)
	}
	parentComps, name := comps[:len(comps)-1], comps[len(comps)-1]
	switch hdr.Typeflag {
	case tar.TypeDir:
		_, err := stagedDir(stage, comps, mode|0o700, display, "import")
		return 0, err
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont:
		parent, err := stagedDir(stage, parentComps, defaultDirMode, display, "import")
		if err != nil {
			return 0, err
		}
		return writeStagedFile(parent, name, display, mode, hdr.ModTime, content, "import")
	case tar.TypeSymlink:
		if !symlinkStaysInside(parentComps, hdr.Linkname) {
			return 0, invalid(display, "tar entry %q is a symlink to %q, which points outside the archive", display, hdr.Linkname)
		}
		parent, err := stagedDir(stage, parentComps, defaultDirMode, display, "import")
		if err != nil {
			return 0, err
		}
		return 0, placeAtomic(parent, name, display, "import", func(tmp string) error { return os.Symlink(hdr.Linkname, tmp) })
	case tar.TypeLink:
		target, err := parseArchivePath(strings.TrimRight(hdr.Linkname, "/"))
		if err != nil {
			return 0, invalid(display, "tar entry %q is a hard link to %q, which points outside the archive", display, hdr.Linkname)
		}
		if len(target) == 0 {
			return 0, invalid(display, "tar entry %q is a hard link without a target", display)
		}
		notEarlier := invalid(display, "tar entry %q is a hard link to %q, which is not an earlier file of this archive", display, hdr.Linkname)
		targetDir, err := stagedDirExisting(stage, target[:len(target)-1], display)
		if err != nil {
			return 0, notEarlierOr(err, notEarlier)
		}
		targetPath := filepath.Join(targetDir, target[len(target)-1])
		if fi, err := os.Lstat(targetPath); err != nil || !fi.Mode().IsRegular() {
			return 0, notEarlier
		}
		parent, err := stagedDir(stage, parentComps, defaultDirMode, display, "import")
		if err != nil {
			return 0, err
		}
		return 0, placeAtomic(parent, name, display, "import", func(tmp string) error { return os.Link(targetPath, tmp) })
	}
	return 0, invalid(display, "tar entry %q has unsupported type %s; only files, directories, symlinks and hard links are imported", display, typeName(hdr.Typeflag))
}

// stagedDirExisting walks to an existing staged directory, never through a symlink.
func stagedDirExisting(stage string, comps []string, display string) (string, error) {
	at := stage
	for _, c := range comps {
		at = filepath.Join(at, c)
		fi, err := os.Lstat(at)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", symlinkRefused(display, "import")
		}
		if !fi.IsDir() {
			return "", syscall.ENOENT
		}
	}
	return at, nil
}

func notEarlierOr(err error, notEarlier *fsError) error {
	var fe *fsError
	if errors.As(err, &fe) {
		return fe
	}
	return notEarlier
}

func typeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character-device"
	case tar.TypeBlock:
		return "block-device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("%q", string(t))
}

// fsTarIn extracts the framed archive on stdin below dest, all or nothing.
func fsTarIn(dest string, stdin io.Reader, stdout io.Writer) error {
	var res importResult
	err := stagedMerge(dest, "import", func(stage string) error {
		frames := &frameReader{r: bufio.NewReaderSize(stdin, 256*1024)}
		var err error
		if res, err = extractInto(stage, frames); err != nil {
			return err
		}
		// Past the archive's end blocks: only the commit frame says the host's source completed.
		_, err = io.Copy(io.Discard, frames)
		return err
	})
	if err != nil {
		return err
	}
	return writeJSON(stdout, res)
}

// stagedMerge fills a fresh staging directory beside dest (in its nearest existing ancestor, so
// nothing is created on failure) and merges it into dest once fill succeeded; the staging
// directory goes either way.
func stagedMerge(dest, action string, fill func(stage string) error) error {
	base, err := nearestDir(dest, action)
	if err != nil {
		return err
	}
	stage, err := newStage(base, action, dest)
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := fill(stage); err != nil {
		return err
	}
	return mergeInto(stage, dest, action)
}

// mergeInto moves the contents of stage into dest (created, never through a symlink):
// directories merge, other entries replace non-directories; a directory meeting a non-directory
// is a conflict, found by a dry run before anything moves (src/workspace/staging.ts mergeTree).
func mergeInto(stage, dest, action string) error {
	fi, err := lstatNoSymlink(dest, action)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := stagedDir("/", strings.Split(strings.TrimPrefix(dest, "/"), "/"), defaultDirMode, dest, action); err != nil {
			return err
		}
	} else if err != nil {
		return toFsError(err, action, dest)
	} else if !fi.IsDir() {
		return &fsError{Code: "conflict", Errno: "EEXIST", Message: fmt.Sprintf("cannot write %s: it exists and is not a directory; remove it first", dest), Path: dest}
	}
	if err := mergeVisit(stage, dest, false); err != nil {
		return err
	}
	return mergeVisit(stage, dest, true)
}

func mergeVisit(from, to string, move bool) error {
	list, err := os.ReadDir(from)
	if err != nil {
		return toFsError(err, "merge", from)
	}
	for _, d := range list {
		src, dst := filepath.Join(from, d.Name()), filepath.Join(to, d.Name())
		existing, err := os.Lstat(dst)
		if errors.Is(err, fs.ErrNotExist) {
			if move {
				if err := os.Rename(src, dst); err != nil {
					return toFsError(err, "write", dst)
				}
			}
			continue
		}
		if err != nil {
			return toFsError(err, "write", dst)
		}
		if d.IsDir() != existing.IsDir() {
			what := "not a directory"
			if existing.IsDir() {
				what = "a directory"
			}
			return &fsError{Code: "conflict", Message: fmt.Sprintf("cannot write %s: it exists and is %s; remove it first", dst, what), Path: dst}
		}
		if !d.IsDir() {
			if move {
				if err := os.Rename(src, dst); err != nil {
					return toFsError(err, "write", dst)
				}
			}
			continue
		}
		if err := mergeVisit(src, dst, move); err != nil {
			return err
		}
	}
	return nil
}

// ---- copy ----

// fsCopy copies a directory tree (into staging, then merged into to) or a symlink (as itself,
// replacing a non-directory at to), as the host's copy does: symlinks keep their target text,
// file modes are kept, devices/FIFOs/sockets are skipped. Regular files are copied by the host
// through read and write.
func fsCopy(from, to string) error {
	if from == "/" {
		return invalid(from, "path: cannot copy the root directory")
	}
	// The parent without a symlink; the entry itself may be one (it is copied as itself).
	if _, err := lstatNoSymlink(filepath.Dir(from), "copy"); err != nil {
		return toFsError(err, "copy", from)
	}
	fi, err := os.Lstat(from)
	if err != nil {
		return toFsError(err, "copy", from)
	}
	if fi.Mode()&fs.ModeSymlink == 0 && !fi.IsDir() {
		return invalid(from, "cannot copy %s: fs copy takes a directory or a symlink", from)
	}
	if to == "/" {
		return invalid(to, "path: cannot write the root directory")
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(from)
		if err != nil {
			return toFsError(err, "copy", from)
		}
		parent, err := nearestDir(filepath.Dir(to), "copy")
		if err != nil {
			return err
		}
		dir, err := stagedDir(parent, splitBelow(parent, filepath.Dir(to)), defaultDirMode, to, "copy")
		if err != nil {
			return err
		}
		return placeAtomic(dir, filepath.Base(to), to, "copy", func(tmp string) error { return os.Symlink(target, tmp) })
	}
	return stagedMerge(to, "copy", func(stage string) error { return copyTree(from, stage, stage) })
}

// splitBelow: the components of p below its ancestor base.
func splitBelow(base, p string) []string {
	rel, _ := filepath.Rel(base, p)
	if rel == "." {
		return nil
	}
	return strings.Split(rel, "/")
}

func copyTree(from, into, stage string) error {
	list, err := os.ReadDir(from)
	if err != nil {
		return toFsError(err, "copy", from)
	}
	for _, d := range list {
		src, dst := filepath.Join(from, d.Name()), filepath.Join(into, d.Name())
		if src == stage {
			continue // the staging directory of this very copy (a tree copied into itself)
		}
		fi, err := os.Lstat(src)
		if err != nil {
			continue // gone since the listing
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(dst, os.FileMode(uint32(fi.Mode().Perm())|0o700)); err != nil {
				return toFsError(err, "copy", src)
			}
			if err := copyTree(src, dst, stage); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return toFsError(err, "copy", src)
			}
			if err := os.Symlink(target, dst); err != nil {
				return toFsError(err, "copy", src)
			}
		case fi.Mode().IsRegular():
			f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return toFsError(err, "copy", src)
			}
			_, err = writeStagedFile(into, d.Name(), src, uint32(fi.Mode().Perm()), time.Time{}, f, "copy")
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}
