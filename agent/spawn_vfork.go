package main

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Starting the trampoline without Go's ForkExec. Go's child resets every signal handler the
// runtime installed (56 rt_sigaction, ~1.6 ms under gVisor at ~29 µs a system call) because it
// unblocks signals before execve, and a handler must not run in a child that shares the parent's
// memory. Here the child keeps every signal blocked up to execve, which puts every handled
// signal back to its default itself, and the trampoline (trampoline_amd64.go) unblocks them as
// its first step: no handler can run in between, and a signal sent meanwhile stays pending and
// is delivered to the target as it would have been. The rest is Go's child as the agent uses it:
// setsid, the credentials, chdir, the five descriptors, the controlling terminal, execve.

// vforkPlan is everything the child needs, prepared by the parent: the child calls nothing
// but system calls (no allocation, no stack growth, no runtime).
type vforkPlan struct {
	path, dir  *byte
	argv, envv []*byte
	fds        [5]int // the exec's stdin, stdout, stderr, the trampoline's memfd, the error pipe
	cred       bool
	uid, gid   uintptr
	groups     []uint32
	ctty       bool
	all, old   uint64 // signal masks
	errno      uint32
}

// vforkStart starts the trampoline with fds (see vforkPlan.fds); errors of the child before the
// trampoline runs are written to the error pipe as the trampoline writes its own.
func vforkStart(path string, argv, env []string, dir string, c *syscall.Credential, ctty bool, fds [5]int) (int, error) {
	p := &vforkPlan{fds: fds, ctty: ctty, all: ^uint64(0)}
	var err error
	if p.path, err = syscall.BytePtrFromString(path); err != nil {
		return 0, err
	}
	if p.dir, err = syscall.BytePtrFromString(dir); err != nil {
		return 0, err
	}
	if p.argv, err = syscall.SlicePtrFromStrings(argv); err != nil {
		return 0, err
	}
	if p.envv, err = syscall.SlicePtrFromStrings(env); err != nil {
		return 0, err
	}
	if c != nil {
		p.cred, p.uid, p.gid, p.groups = true, uintptr(c.Uid), uintptr(c.Gid), c.Groups
	}
	// The signal mask is the thread's: block, fork and restore on one thread, with no descriptor
	// opened meanwhile without close-on-exec (ForkLock, as ForkExec takes it).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.ForkLock.Lock()
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(&p.all)), uintptr(unsafe.Pointer(&p.old)), 8, 0, 0)
	if e != 0 {
		syscall.ForkLock.Unlock()
		return 0, e
	}
	pid, errno := vforkExec(p)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2, uintptr(unsafe.Pointer(&p.old)), 0, 8, 0, 0)
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(p)
	if errno != 0 {
		return 0, errno
	}
	return int(pid), nil
}

// vforkExec forks; in the child it sets up and executes p, or writes the errno to p's error
// pipe and exits 253. In the parent it returns once the child has executed or exited.
// nosplit and norace, as syscall's own child: the child shares the parent's memory and stack,
// so it must not grow the stack, allocate or enter the runtime.
//
//go:nosplit
//go:norace
func vforkExec(p *vforkPlan) (pid uintptr, errno syscall.Errno) {
	var (
		err1   syscall.Errno
		i      int
		nextfd int
		pipe   int
		ngrp   uintptr
		grp    uintptr
	)
	r1, e := rawVfork()
	if e != 0 || r1 != 0 {
		return r1, syscall.Errno(e)
	}

	// The child. Every signal is blocked until the trampoline unblocks them.
	pipe = p.fds[4]
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	if p.cred {
		ngrp = uintptr(len(p.groups))
		if ngrp > 0 {
			grp = uintptr(unsafe.Pointer(&p.groups[0]))
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETGROUPS, ngrp, grp, 0); err1 != 0 {
			goto childerror
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETGID, p.gid, 0, 0); err1 != 0 {
			goto childerror
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETUID, p.uid, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(p.dir)), 0, 0); err1 != 0 {
		goto childerror
	}
	// The descriptors onto 0..4, as ForkExec does: first move up any that a lower slot would
	// overwrite, then dup each onto its slot (not close-on-exec).
	nextfd = len(p.fds)
	for i = 0; i < len(p.fds); i++ {
		if p.fds[i] >= nextfd {
			nextfd = p.fds[i] + 1
		}
	}
	for i = 0; i < len(p.fds); i++ {
		if p.fds[i] < i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.fds[i]), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
				goto childerror
			}
			p.fds[i] = nextfd
			nextfd++
		}
	}
	pipe = p.fds[4] // moved or not, slot 4's source is dup'ed last and stays open
	for i = 0; i < len(p.fds); i++ {
		if p.fds[i] == i {
			_, _, err1 = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(i), syscall.F_SETFD, 0)
		} else {
			_, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.fds[i]), uintptr(i), 0)
		}
		if err1 != 0 {
			goto childerror
		}
	}
	if p.ctty {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_IOCTL, 0, syscall.TIOCSCTTY, 1); err1 != 0 {
			goto childerror
		}
	}
	_, _, err1 = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(p.path)), uintptr(unsafe.Pointer(&p.argv[0])), uintptr(unsafe.Pointer(&p.envv[0])))

childerror:
	p.errno = uint32(err1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&p.errno)), 4)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 253, 0, 0)
	}
}
