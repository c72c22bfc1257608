package main

// The exec trampoline: a tiny static ELF the agent writes into a memfd at start and executes
// for every exec where the spawn's child cannot do it all itself (clone3 refused, as Docker's
// default seccomp profile does; see spawn_vfork.go), with the exec's credentials already set. It
//   - (amd64) unblocks every signal: vforkStart's child starts it with all of them blocked,
//   - marks fd 4 (a pipe to the agent) close-on-exec,
//   - closes fd 3 (its own memfd),
//   - makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across execve), so
//     every orphan of the exec's tree (a double fork, `setsid -f`) is reparented to the exec's
//     process and stays its descendant, where the agent's kill finds it,
//   - execve(argv[0], &argv[1], envp): argv[0] is the resolved path, argv[1..] the exec's argv,
//   - and if execve failed, writes the errno (4 bytes) to fd 4 and exits 127.
// A successful execve closes fd 4, so the agent reads EOF: started. Hand-assembled because a
// Go helper costs 2.5 ms to start on this machine (and several threads against a pids limit).

import "encoding/binary"

const (
	trampolineFD = 3
	execErrFD    = 4
)

// trampolineELF is one PT_LOAD segment holding the ELF header, the program header and the code.
func trampolineELF() []byte {
	const base = 0x400000
	const ehsize, phsize = 64, 56
	code := trampolineCode()
	total := ehsize + phsize + len(code)
	b := make([]byte, total)
	le := binary.LittleEndian
	copy(b[0:], []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})
	le.PutUint16(b[16:], 2) // ET_EXEC
	le.PutUint16(b[18:], elfMachine)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+ehsize+phsize) // entry
	le.PutUint64(b[32:], ehsize)             // phoff
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1) // phnum
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[8:], 0)
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(total))
	le.PutUint64(ph[40:], uint64(total))
	le.PutUint64(ph[48:], 0x1000)
	copy(b[ehsize+phsize:], code)
	return b
}
