package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
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

func readColonFile(path string, fields int, each func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ":")
		if len(parts) < fields {
			continue
		}
		each(parts)
	}
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
		userPart = strconv.Itoa(os.Getuid())
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
		cred.gid, cred.self = uint32(os.Getgid()), true
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
