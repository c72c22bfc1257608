//go:build !amd64

package main

// rawVfork is not written for this architecture: execs start with syscall.ForkExec.
func rawVfork() (pid uintptr, errno uintptr) { return ^uintptr(0), uintptr(38) /* ENOSYS */ }

const vforkArch = false
