package main

// rawVforkSyscall is clone(a1 = flags) or clone3(a1 = args, a2 = size) asking for a vfork
// child (spawn_vfork_amd64.s): 0 in the child, the child's pid in the parent once the child
// has executed or exited.
func rawVforkSyscall(trap, a1, a2 uintptr) (r1, errno uintptr)

// vforkArch: this architecture starts execs with vforkExec.
const vforkArch = true
