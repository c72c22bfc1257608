#include "textflag.h"

// func rawVforkSyscall(trap, a1, a2 uintptr) (r1, errno uintptr)
//
// A clone or clone3 that makes a vfork child (CLONE_VM|CLONE_VFORK, on the caller's stack), as
// syscall's own rawVforkSyscall: the return address is popped into a register before the call
// and pushed back after, so the child, which runs first on the same stack, cannot overwrite
// the parent's.
TEXT ·rawVforkSyscall(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	trap+0(FP), AX
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+24(FP)
	NEGQ	AX
	MOVQ	AX, errno+32(FP)
	RET
ok:
	MOVQ	AX, r1+24(FP)
	MOVQ	$0, errno+32(FP)
	RET
