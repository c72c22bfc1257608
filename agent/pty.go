package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// openPty opens a new pseudo-terminal pair in the box's devpts: the master (pollable, for the
// agent) and the slave (the exec's stdin, stdout and stderr and its controlling terminal).
func openPty(cols, rows int, uid, gid uint32) (master *os.File, slave *os.File, err error) {
	m, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	var unlock int32
	if err := ioctl(m, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		syscall.Close(m)
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	var n uint32
	if err := ioctl(m, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); err != nil {
		syscall.Close(m)
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	s, err := syscall.Open(name, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(m)
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	// The terminal belongs to the exec's user, as a login's would.
	_ = syscall.Fchown(s, int(uid), int(gid))
	_ = syscall.Fchmod(s, 0o620)
	if cols > 0 && rows > 0 {
		_ = setWinsize(m, cols, rows)
	}
	if err := syscall.SetNonblock(m, true); err != nil {
		syscall.Close(m)
		syscall.Close(s)
		return nil, nil, err
	}
	return os.NewFile(uintptr(m), "ptmx"), os.NewFile(uintptr(s), name), nil
}

type winsize struct {
	rows, cols, x, y uint16
}

func setWinsize(fd int, cols, rows int) error {
	ws := winsize{rows: uint16(rows), cols: uint16(cols)}
	return ioctl(fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
}

func ioctl(fd int, req uint, arg uintptr) error {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if e != 0 {
		return e
	}
	return nil
}
