package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// credential is who an exec runs as, resolved the way the engine (runc) resolves a user spec
// against the box's /etc/passwd and /etc/group: "name", "uid", "name:group", "uid:gid".
type credential struct {
	uid, gid uint32
	groups   []uint32
	home     string
	// self: the agent's own uid and gid (no user given), applied without setuid or setgroups,
	// which a non-root agent could not do (Kubernetes runs it as the image's user then).
	self bool
}

type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// readColonFile calls each with the fields of every line of path that has at least fields of
// them, from colonFiles' copy of it while the file is unchanged.
func readColonFile(path string, fields int, each func([]string)) {
	for _, parts := range colonFiles.lines(path) {
		if len(parts) >= fields {
			each(parts)
		}
	}
}

// colonFiles keeps /etc/passwd and /etc/group as last read: an exec checks them with one stat
// instead of reading them again (an open, a read to EOF and a close each, and Go's os.File
// adds four fcntl and an epoll_ctl: under gVisor every system call costs tens of µs).
var colonFiles = &colonFileCache{m: map[string]colonFile{}}

type colonFileCache struct {
	mu sync.Mutex
	m  map[string]colonFile
}

type colonFile struct {
	stamp fileStamp
	lines [][]string
}

// fileStamp is what a rewrite of a file changes: a new file (useradd renames one in) has
// another inode, an edit in place another size, mtime or ctime.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// colonSettle: a file whose ctime is this recent is read again at every exec, never kept. File
// times come from a coarse clock (a jiffy or more): two edits of the same size within one tick
// leave the same stamp, and only a stamp older than any tick tells the content apart.
var colonSettle = 2 * time.Second

func (c *colonFileCache) lines(path string) [][]string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		c.forget(path)
		return nil
	}
	stamp := fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	c.mu.Lock()
	cached, ok := c.m[path]
	c.mu.Unlock()
	if ok && cached.stamp == stamp {
		return cached.lines
	}
	lines := parseColonFile(path)
	if time.Since(time.Unix(st.Ctim.Unix())) > colonSettle {
		c.mu.Lock()
		c.m[path] = colonFile{stamp: stamp, lines: lines}
		c.mu.Unlock()
	} else {
		c.forget(path)
	}
	return lines
}

func (c *colonFileCache) forget(path string) {
	c.mu.Lock()
	delete(c.m, path)
	c.mu.Unlock()
}

// parseColonFile reads path's lines, each split at ':' (blank lines and comments left out).
func parseColonFile(path string) [][]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

func readPasswd() []passwdEntry {
	var out []passwdEntry
	readColonFile(passwdFile, 7, func(p []string) {
		uid, err1 := strconv.ParseUint(p[2], 10, 32)
		gid, err2 := strconv.ParseUint(p[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		out = append(out, passwdEntry{name: p[0], uid: uint32(uid), gid: uint32(gid), home: p[5]})
	})
	return out
}

func readGroups() []groupEntry {
	var out []groupEntry
	readColonFile(groupFile, 4, func(p []string) {
		gid, err := strconv.ParseUint(p[2], 10, 32)
		if err != nil {
			return
		}
		var members []string
		for _, m := range strings.Split(p[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: p[0], gid: uint32(gid), members: members})
	})
	return out
}

func isNumeric(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// lookupUser resolves a user spec; "" is root. An unknown name is an error; an unknown uid
// is used as it is, with gid 0 and home "/" (as the engine does).
func lookupUser(spec string) (credential, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	self := userPart == ""
	if self {
		userPart = strconv.Itoa(selfUid)
	}
	users := readPasswd()
	numeric := isNumeric(userPart)
	var want uint64
	if numeric {
		n, err := strconv.ParseUint(userPart, 10, 32)
		if err != nil {
			return credential{}, fmt.Errorf("bad uid %q", userPart)
		}
		want = n
	}
	var cred credential
	var name string
	found := false
	for _, u := range users {
		if (numeric && uint64(u.uid) == want) || (!numeric && u.name == userPart) {
			cred = credential{uid: u.uid, gid: u.gid, home: u.home}
			name = u.name
			found = true
			break
		}
	}
	if !found {
		if !isNumeric(userPart) {
			return cred, fmt.Errorf("unable to find user %s: no matching entries in passwd file", userPart)
		}
		cred = credential{uid: uint32(want), gid: 0, home: "/"}
	}
	if self && !hasGroup {
		// The process's own group, and its supplementary groups as they are.
		cred.gid, cred.self = uint32(selfGid), true
		return cred, nil
	}
	groups := readGroups()
	if hasGroup && groupPart != "" {
		if isNumeric(groupPart) {
			n, err := strconv.ParseUint(groupPart, 10, 32)
			if err != nil {
				return cred, fmt.Errorf("bad gid %q", groupPart)
			}
			cred.gid = uint32(n)
		} else {
			ok := false
			for _, g := range groups {
				if g.name == groupPart {
					cred.gid = g.gid
					ok = true
					break
				}
			}
			if !ok {
				return cred, fmt.Errorf("unable to find group %s: no matching entries in group file", groupPart)
			}
		}
	}
	// Supplementary groups: the groups that list the user by name (only without an explicit group, as runc).
	if name != "" && !hasGroup {
		for _, g := range groups {
			for _, m := range g.members {
				if m == name && g.gid != cred.gid {
					cred.groups = append(cred.groups, g.gid)
				}
			}
		}
	}
	return cred, nil
}
