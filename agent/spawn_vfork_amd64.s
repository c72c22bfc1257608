#include "textflag.h"

// func rawVfork() (pid uintptr, errno uintptr)
//
// clone(CLONE_VM|CLONE_VFORK|SIGCHLD) as syscall's rawVforkSyscall does it: the return address
// is popped into a register before the call and pushed back after, so the child, which runs
// first on the same stack, cannot overwrite the parent's.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-16
	MOVQ	$0x4111, DI // CLONE_VM|CLONE_VFORK|SIGCHLD
	MOVQ	$0, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	$56, AX // SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, pid+0(FP)
	NEGQ	AX
	MOVQ	AX, errno+8(FP)
	RET
ok:
	MOVQ	AX, pid+0(FP)
	MOVQ	$0, errno+8(FP)
	RET
