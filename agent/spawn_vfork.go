package main

import (
	"errors"
	"runtime"
	"syscall"
	"unsafe"
)

// Starting execs without Go's ForkExec child (amd64). Go's child resets every signal handler
// the runtime installed (56 rt_sigaction, ~1.6 ms under gVisor at ~29 µs a system call) because
// it unblocks signals before execve, and a handler must not run in a child that shares the
// parent's memory. Two ways around it, both vfork children that call nothing but system calls:
//
//   - clear (clone3 with CLONE_CLEAR_SIGHAND: Linux 5.5, gVisor): the child starts with the
//     default handlers, so it unblocks signals at once, makes itself a child subreaper (what the
//     trampoline does) and executes the target itself: one execve per exec instead of two.
//   - trampoline (vfork; where clone3 is refused, as Docker's default seccomp profile does):
//     the child keeps every signal blocked through execve, which resets every handled signal to
//     its default itself, and the trampoline (trampoline_amd64.go) unblocks them first.
//
// Either way no handler can run in the child, and a signal sent meanwhile stays pending and is
// delivered to the target as it would have been. The rest is Go's child as the agent uses it:
// setsid, the credentials, chdir, the descriptors, the controlling terminal, execve; a failure
// is written to the error pipe (4 bytes, the errno) as the trampoline writes its own, and the
// child exits 127.

// errNoClone3 says that this kernel (or its seccomp filter) refuses clone3 with
// CLONE_CLEAR_SIGHAND: no child was made; the trampoline's way is left.
var errNoClone3 = errors.New("clone3 with CLONE_CLEAR_SIGHAND refused")

// vforkPlan is everything the child needs, prepared by the parent: the child calls nothing
// but system calls (no allocation, no stack growth, no runtime).
type vforkPlan struct {
	path, dir  *byte
	argv, envv []*byte
	fds        [5]int // the exec's stdin, stdout, stderr (and the trampoline's memfd and error pipe)
	nfds       int
	pipe       int  // the error pipe (close-on-exec)
	clear      bool // clone3 with CLONE_CLEAR_SIGHAND, the target executed directly
	cred       bool
	uid, gid   uintptr
	groups     []uint32
	ctty       bool
	all, old   uint64 // signal masks
	none       uint64
	errno      uint32
	clone      [8]uint64 // struct clone_args (CLONE_ARGS_SIZE_VER0)
}

// vforkStart starts path (the target itself when clear, else the trampoline) with fds on
// 0..len(fds)-1 and pipe as its error pipe.
func vforkStart(path string, argv, env []string, dir string, c *syscall.Credential, ctty bool, fds []int, pipe int, clear bool) (int, error) {
	p := &vforkPlan{pipe: pipe, clear: clear, ctty: ctty, all: ^uint64(0)}
	p.nfds = copy(p.fds[:], fds)
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
	if clear {
		p.clone[0] = 0x100 | 0x4000 | 0x100000000 // CLONE_VM|CLONE_VFORK|CLONE_CLEAR_SIGHAND
		p.clone[4] = uint64(syscall.SIGCHLD)      // exit_signal
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
		if clear && (errno == syscall.ENOSYS || errno == syscall.EINVAL || errno == syscall.EPERM || errno == syscall.E2BIG) {
			return 0, errNoClone3
		}
		return 0, errno
	}
	return int(pid), nil
}

// vforkExec forks; in the child it sets up and executes p, or writes the errno to p's error
// pipe and exits 127. In the parent it returns once the child has executed or exited.
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
		ngrp   uintptr
		grp    uintptr
		r1, e  uintptr
	)
	if p.clear {
		r1, e = rawVforkSyscall(435 /* SYS_clone3 */, uintptr(unsafe.Pointer(&p.clone)), unsafe.Sizeof(p.clone))
	} else {
		r1, e = rawVforkSyscall(syscall.SYS_CLONE, 0x100|0x4000|uintptr(syscall.SIGCHLD) /* CLONE_VM|CLONE_VFORK */, 0)
	}
	if e != 0 || r1 != 0 {
		return r1, syscall.Errno(e)
	}

	// The child.
	if p.clear {
		// Its handlers are the defaults already: signals can come.
		if _, _, err1 = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2, uintptr(unsafe.Pointer(&p.none)), 0, 8, 0, 0); err1 != 0 {
			goto childerror
		}
		// A child subreaper (kept across execve): every orphan of the exec's tree stays its
		// descendant, where the agent's kill finds it.
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0); err1 != 0 {
			goto childerror
		}
	}
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
	// The descriptors onto 0..nfds-1, as ForkExec does: first move the error pipe and any
	// descriptor a lower slot would overwrite above them all, then dup each onto its slot (not
	// close-on-exec).
	nextfd = p.nfds
	for i = 0; i < p.nfds; i++ {
		if p.fds[i] >= nextfd {
			nextfd = p.fds[i] + 1
		}
	}
	if p.pipe >= nextfd {
		nextfd = p.pipe + 1
	}
	if p.pipe < p.nfds {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.pipe), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
			goto childerror
		}
		p.pipe = nextfd
		nextfd++
	}
	for i = 0; i < p.nfds; i++ {
		if p.fds[i] < i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.fds[i]), uintptr(nextfd), syscall.O_CLOEXEC); err1 != 0 {
				goto childerror
			}
			p.fds[i] = nextfd
			nextfd++
		}
	}
	for i = 0; i < p.nfds; i++ {
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
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.pipe), uintptr(unsafe.Pointer(&p.errno)), 4)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 127, 0, 0)
	}
}
