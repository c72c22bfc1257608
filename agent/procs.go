package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

type procStat struct {
	pid, ppid, pgrp, session int
	state                    byte
	comm                     string
}

// readProcs reads /proc/[0-9]*/stat of every process in the box.
func readProcs() map[int]procStat {
	out := map[int]procStat{}
	d, err := os.Open("/proc")
	if err != nil {
		return out
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	buf := make([]byte, 512)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid, buf); ok {
			out[pid] = st
		}
	}
	return out
}

func readStat(pid int, buf []byte) (procStat, bool) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, false
	}
	n, err := syscall.Read(fd, buf)
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return procStat{}, false
	}
	s := string(buf[:n])
	open := strings.IndexByte(s, '(')
	close := strings.LastIndexByte(s, ')')
	if open < 0 || close < open || close+2 >= len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[close+2:])
	if len(f) < 4 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, session: sess, state: f[0][0], comm: s[open+1 : close]}, true
}

// descendsFrom reports whether pid is root or below it in the parent chain.
func descendsFrom(procs map[int]procStat, pid, root int) bool {
	for i := 0; i < 4096 && pid > 1; i++ {
		if pid == root {
			return true
		}
		st, ok := procs[pid]
		if !ok {
			return false
		}
		pid = st.ppid
	}
	return pid == root
}

// killTree kills an exec: its process, its process group and session, and everything descended
// from it. Each target is stopped (SIGSTOP) as soon as it is found and the scan repeats until
// a pass finds nothing new — a stopped process cannot fork, so nothing escapes between passes —
// then all are killed at once. Orphans of the tree stay descendants because the exec's process
// is a child subreaper (see trampoline.go); `setsid` children keep their parent; double-fork
// orphans that are not (no memfd) still share the session. PID 1 is never a target.
func killTree(root int) int {
	targets := map[int]bool{}
	for pass := 0; pass < 100; pass++ {
		added := false
		for pid, st := range readProcs() {
			if pid <= 1 || targets[pid] {
				continue
			}
			if st.session == root || st.pgrp == root || descendsFromAll(pid, root, st) {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				targets[pid] = true
				added = true
			}
		}
		if !added {
			break
		}
	}
	_ = syscall.Kill(-root, syscall.SIGKILL)
	for pid := range targets {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(targets)
}

// descendsFromAll walks the parent chain with fresh reads: the map of one pass may miss a
// parent born after the directory was listed.
func descendsFromAll(pid, root int, st procStat) bool {
	if pid == root {
		return true
	}
	buf := make([]byte, 512)
	p := st.ppid
	for i := 0; i < 4096 && p > 1; i++ {
		if p == root {
			return true
		}
		s, ok := readStat(p, buf)
		if !ok {
			return false
		}
		p = s.ppid
	}
	return p == root
}
