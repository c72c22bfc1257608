package main

import (
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The agent's own ids, which it never changes: read once, not at every exec (each os.Getpid,
// os.Getuid and os.Getgid is a system call, tens of µs under gVisor).
var (
	selfPid = os.Getpid()
	selfUid = os.Getuid()
	selfGid = os.Getgid()
)

// spawnSpec is one process to start: already resolved (path, credentials, environment).
type spawnSpec struct {
	path  string
	argv  []string
	env   []string
	dir   string
	cred  credential
	files [3]uintptr
	tty   bool
	// direct: no trampoline, so no subreaper — the box's command, whose orphans must come to
	// PID 1 to be reaped (a subreaper that never waits would keep them as zombies).
	direct bool
}

// spawner starts an exec's process as a child subreaper, best way first (fork below): a vfork
// child that executes the target itself (clone3, spawn_vfork.go), else through the trampoline
// in a memfd (trampoline.go), else directly (no memfd: losing only the subreaper).
type spawner struct {
	memfd int
	// vfork: execs start with vforkStart (no signal reset in the child), unless the architecture
	// has no rawVforkSyscall or the Go runtime raised the agent's RLIMIT_NOFILE (to its hard limit less
	// one): then ForkExec, which puts the box's own soft limit back in the child.
	vfork bool
	// noClone3: clone3 with CLONE_CLEAR_SIGHAND was refused once (an old kernel, Docker's
	// default seccomp profile): vforkStart's trampoline way from then on.
	noClone3 atomic.Bool
}

func newSpawner() *spawner {
	s := &spawner{memfd: -1}
	var lim syscall.Rlimit
	s.vfork = vforkArch && syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur != lim.Max-1
	name := []byte("sbx-exec\x00")
	fd, _, e := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), 1 /* MFD_CLOEXEC */, 0)
	if e != 0 {
		return s
	}
	elf := trampolineELF()
	if n, err := syscall.Write(int(fd), elf); err != nil || n != len(elf) {
		syscall.Close(int(fd))
		return s
	}
	s.memfd = int(fd)
	return s
}

// start forks and executes spec; onExit is registered with the reaper before it can run.
// It returns once the process runs the target (or failed to: then the errno, and the
// reaper still calls onExit for the trampoline's exit).
func (a *agent) start(spec spawnSpec, onExit func(syscall.WaitStatus)) (int, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return 0, err
	}
	r, w := p[0], p[1]
	sys := &syscall.SysProcAttr{Setsid: true}
	if spec.tty {
		sys.Setctty = true
		sys.Ctty = 0
	}
	// The agent's own uid and gid need no setuid, and setgroups only when groups are asked for:
	// a non-root agent (the image's user on Kubernetes) can start processes as itself.
	same := spec.cred.uid == uint32(selfUid) && spec.cred.gid == uint32(selfGid)
	if !same || (!spec.cred.self && len(spec.cred.groups) > 0) {
		sys.Credential = &syscall.Credential{Uid: spec.cred.uid, Gid: spec.cred.gid, Groups: spec.cred.groups}
	}
	a.procMu.Lock()
	pid, piped, err := a.fork(spec, sys, w)
	if err == nil {
		a.waiters[pid] = onExit
	}
	a.procMu.Unlock()
	syscall.Close(w)
	if err != nil {
		syscall.Close(r)
		return 0, err
	}
	if !piped {
		syscall.Close(r)
		return pid, nil
	}
	var b [4]byte
	n, _ := readFull(r, b[:])
	syscall.Close(r)
	if n == 4 {
		return pid, syscall.Errno(binary.LittleEndian.Uint32(b[:]))
	}
	return pid, nil
}

// fork starts spec with one of the ways below, best first; piped: the child reports a failure
// to start the target on w (4 bytes, the errno), and a successful execve closes it.
func (a *agent) fork(spec spawnSpec, sys *syscall.SysProcAttr, w int) (pid int, piped bool, err error) {
	s := a.spawner
	fds := []int{int(spec.files[0]), int(spec.files[1]), int(spec.files[2])}
	trampoline := append([]string{spec.path}, spec.argv...)
	if !spec.direct && s.vfork {
		if !s.noClone3.Load() {
			pid, err := vforkStart(spec.path, spec.argv, spec.env, spec.dir, sys.Credential, spec.tty, fds, w, true)
			if err != errNoClone3 {
				return pid, true, err
			}
			s.noClone3.Store(true)
		}
		if s.memfd >= 0 {
			pid, err := vforkStart("/proc/self/fd/3", trampoline, spec.env, spec.dir, sys.Credential, spec.tty, append(fds, s.memfd, w), w, false)
			return pid, true, err
		}
	}
	files := []uintptr{spec.files[0], spec.files[1], spec.files[2]}
	if s.memfd >= 0 && !spec.direct {
		pid, err := syscall.ForkExec("/proc/self/fd/3", trampoline, &syscall.ProcAttr{Dir: spec.dir, Env: spec.env, Files: append(files, uintptr(s.memfd), uintptr(w)), Sys: sys})
		return pid, true, err
	}
	pid, err = syscall.ForkExec(spec.path, spec.argv, &syscall.ProcAttr{Dir: spec.dir, Env: spec.env, Files: files, Sys: sys})
	return pid, false, err
}

func readFull(fd int, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := syscall.Read(fd, b[got:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return got, err
		}
		got += n
	}
	return got, nil
}
