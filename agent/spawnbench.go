package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// runSpawnBench is `sbx-agent spawn-bench N CMD...`: the floor an exec through the agent is
// compared with (the bench's SpawnInBox row). N times, as posix_spawn would and with nothing
// of the agent's around it: one pipe for the command's stdout and stderr, a vfork-style
// ForkExec (Go's syscall.ForkExec is clone(CLONE_VM|CLONE_VFORK), like glibc's posix_spawn),
// its output read to EOF, wait4. The path is resolved once, as a caller that knows it would.
// Prints one line: the N durations in microseconds, space-separated.
func runSpawnBench(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sbx-agent spawn-bench N CMD [ARGS...]")
		return 2
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 100000 {
		fmt.Fprintf(os.Stderr, "sbx-agent: spawn-bench: bad count %q\n", args[0])
		return 2
	}
	cwd, _ := os.Getwd()
	path, err := lookPath(args[1], os.Getenv("PATH"), cwd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbx-agent: spawn-bench: %v\n", err)
		return 1
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbx-agent: spawn-bench: %v\n", err)
		return 1
	}
	env := os.Environ()
	buf := make([]byte, 4096)
	out := make([]byte, 0, n*8)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := spawnOnce(path, args[1:], env, devNull.Fd(), buf); err != nil {
			fmt.Fprintf(os.Stderr, "sbx-agent: spawn-bench: %v\n", err)
			return 1
		}
		if i > 0 {
			out = append(out, ' ')
		}
		out = strconv.AppendInt(out, time.Since(t0).Microseconds(), 10)
	}
	fmt.Println(string(out))
	return 0
}

func spawnOnce(path string, argv, env []string, stdin uintptr, buf []byte) error {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return err
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{stdin, uintptr(p[1]), uintptr(p[1])}})
	syscall.Close(p[1])
	if err != nil {
		syscall.Close(p[0])
		return err
	}
	for {
		n, err := syscall.Read(p[0], buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			break
		}
	}
	syscall.Close(p[0])
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
