package main

import "encoding/binary"

const elfMachine = 183 // EM_AARCH64

const sysMemfdCreate = 279

func trampolineCode() []byte {
	words := []uint32{
		// fcntl(4, F_SETFD, FD_CLOEXEC)
		0xd2800080, // movz x0, #4
		0xd2800041, // movz x1, #2
		0xd2800022, // movz x2, #1
		0xd2800328, // movz x8, #25
		0xd4000001, // svc #0
		// close(3)
		0xd2800060, // movz x0, #3
		0xd2800728, // movz x8, #57
		0xd4000001,
		// prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		0xd2800480, // movz x0, #36
		0xd2800021, // movz x1, #1
		0xd2800002, // movz x2, #0
		0xd2800003, // movz x3, #0
		0xd2800004, // movz x4, #0
		0xd28014e8, // movz x8, #167
		0xd4000001,
		// execve(argv[0], &argv[1], envp)
		0xf94003e9, // ldr x9, [sp]          argc
		0xf94007e0, // ldr x0, [sp, #8]      argv[0]
		0x910043e1, // add x1, sp, #16       &argv[1]
		0x8b090c22, // add x2, x1, x9, lsl #3  envp
		0xd2801ba8, // movz x8, #221
		0xd4000001,
		// write(4, &errno, 4)
		0x4b0003e0, // neg w0, w0
		0xd10043ff, // sub sp, sp, #16
		0xb90003e0, // str w0, [sp]
		0xd2800080, // movz x0, #4
		0x910003e1, // mov x1, sp
		0xd2800082, // movz x2, #4
		0xd2800808, // movz x8, #64
		0xd4000001,
		// exit_group(127)
		0xd2800fe0, // movz x0, #127
		0xd2800bc8, // movz x8, #94
		0xd4000001,
	}
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}
