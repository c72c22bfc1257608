package main

// rawVfork is clone(CLONE_VM|CLONE_VFORK|SIGCHLD) (spawn_vfork_amd64.s): 0 in the child, the
// child's pid in the parent once the child has executed or exited.
func rawVfork() (pid uintptr, errno uintptr)

// vforkArch: this architecture starts execs with vforkExec.
const vforkArch = true
