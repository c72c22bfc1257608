// Entry details for envd (the e2b SDK's EntryInfo, as E2B's envd reports it): owner and group by
// name, a symlink's resolved target and the type and permission bits of what it points at, and
// the file's user metadata (`user.e2b.*` extended attributes). `fs stat|ls PATH --details` add them;
// `fs write PATH [MODE] --owner=USER --meta=KEY=VALUE…` writes as E2B's envd does (see fsWrite
// and, for the walk to the directory, fs_walk.go).
package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// metaXattrPrefix: E2B's envd keeps a file's metadata as `user.e2b.<key>` extended attributes (E2B's own SDK tests set one out of band and read it back as metadata).
const metaXattrPrefix = "user.e2b."

// entryDetails: what `--details` adds to a dirEntry.
type entryDetails struct {
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	TargetType    string            `json:"targetType,omitempty"` // a symlink's target: file, dir, other; "" when it dangles
	TargetMode    uint32            `json:"targetMode,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

type detailedEntry struct {
	dirEntry
	entryDetails
}

// names resolves uids and gids through the box's /etc/passwd and /etc/group, read once per run.
type names struct {
	users  map[uint32]string
	groups map[uint32]string
}

func loadNames() *names {
	n := &names{users: map[uint32]string{}, groups: map[uint32]string{}}
	for _, u := range readPasswd() {
		if _, ok := n.users[u.uid]; !ok {
			n.users[u.uid] = u.name
		}
	}
	for _, g := range readGroups() {
		if _, ok := n.groups[g.gid]; !ok {
			n.groups[g.gid] = g.name
		}
	}
	return n
}

// As E2B's envd: the name, else the number.
func (n *names) user(uid uint32) string {
	if s, ok := n.users[uid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (n *names) group(gid uint32) string {
	if s, ok := n.groups[gid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(gid), 10)
}

func detailsOf(path string, fi fs.FileInfo, n *names) entryDetails {
	var d entryDetails
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		d.Owner, d.Group = n.user(st.Uid), n.group(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// As E2B's envd: the fully resolved target (the link's own path when it cannot be resolved),
		// and the type and permissions of what it points at.
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target = path
		}
		d.SymlinkTarget = &target
		if ti, err := os.Stat(target); err == nil {
			switch {
			case ti.Mode().IsRegular():
				d.TargetType = "file"
			case ti.IsDir():
				d.TargetType = "dir"
			default:
				d.TargetType = "other"
			}
			d.TargetMode = uint32(ti.Mode().Perm())
		}
	}
	d.Metadata = readMeta(path)
	return d
}

// readMeta: the `user.e2b.*` extended attributes of path (not followed through a symlink); none where
// the filesystem has none or the caller may not read them.
func readMeta(path string) map[string]string {
	size, err := llistxattr(path, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = llistxattr(path, buf)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, metaXattrPrefix) {
			continue
		}
		vsize, err := lgetxattr(path, name, nil)
		if err != nil {
			continue
		}
		v := make([]byte, vsize)
		vsize, err = lgetxattr(path, name, v)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimPrefix(name, metaXattrPrefix)] = string(v[:vsize])
	}
	return out
}

func statDetailed(path string) (detailedEntry, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return detailedEntry{}, err
	}
	return detailedEntry{entryOf(baseName(path), fi), detailsOf(path, fi, loadNames())}, nil
}

func listDetailed(path string, recursive bool) ([]detailedEntry, error) {
	entries, err := fsList(path, recursive)
	if err != nil {
		return nil, err
	}
	n := loadNames()
	out := make([]detailedEntry, 0, len(entries))
	for _, e := range entries {
		p := filepath.Join(path, e.Name)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // gone since the listing
		}
		out = append(out, detailedEntry{e, detailsOf(p, fi, n)})
	}
	return out, nil
}

// writeOwner: whom `fs write --owner=USER` hands the file and the directories it creates to.
type writeOwner struct {
	uid, gid int
}

func parseOwner(spec string) (*writeOwner, error) {
	cred, err := lookupUser(spec)
	if err != nil {
		return nil, &fsError{Code: "invalid_argument", Message: "owner: " + err.Error()}
	}
	return &writeOwner{uid: int(cred.uid), gid: int(cred.gid)}, nil
}

// parseMeta reads `--meta=KEY=VALUE` arguments (keys lowercased, as E2B's envd stores them).
func parseMeta(args []string) (map[string]string, error) {
	var out map[string]string
	for _, a := range args {
		kv := strings.TrimPrefix(a, "--meta=")
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return nil, &fsError{Code: "invalid_argument", Message: "metadata: " + strconv.Quote(kv) + " is not KEY=VALUE"}
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.ToLower(k)] = v
	}
	return out, nil
}

// writeMeta sets the metadata on the (temp) file before it is renamed in: a new file's set
// replaces the old one's whole, as on E2B. Through the fd, not the temp file's name (fs_walk.go).
func writeMeta(f *os.File, meta map[string]string) error {
	for k, v := range meta {
		if err := fsetxattr(int(f.Fd()), metaXattrPrefix+k, []byte(v)); err != nil {
			if errors.Is(err, syscall.ENOTSUP) {
				return &fsError{Code: "invalid_argument", Errno: "ENOTSUP", Message: "cannot set metadata on " + f.Name() + ": its filesystem has no user extended attributes"}
			}
			return err
		}
	}
	return nil
}
