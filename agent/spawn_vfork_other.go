//go:build !amd64

package main

// rawVforkSyscall is not written for this architecture: execs start with syscall.ForkExec.
func rawVforkSyscall(trap, a1, a2 uintptr) (r1, errno uintptr) {
	return ^uintptr(0), uintptr(38) /* ENOSYS */
}

const vforkArch = false
