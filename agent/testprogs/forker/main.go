// Command forker is the one static binary of the FROM scratch test image (no shell, no libc):
// `forker tree` starts escapes of every kind and sleeps; the agent's kill must leave none.
//
//	forker sleep     sleeps for an hour
//	forker detach    starts `forker sleep` in a new session and exits (the second half of a double fork)
//	forker tree      starts a plain child, a setsid child, a double-forked setsid grandchild, prints "ready", sleeps
package main

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

func spawn(setsid bool, args ...string) {
	_, err := syscall.ForkExec("/proc/self/exe", append([]string{"forker"}, args...), &syscall.ProcAttr{
		Files: []uintptr{0, 1, 2},
		Env:   []string{}, // as `env -i`: no marker of any kind to find it by
		Sys:   &syscall.SysProcAttr{Setsid: setsid},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "forker:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	switch os.Args[1] {
	case "sleep":
		time.Sleep(time.Hour)
	case "detach":
		spawn(true, "sleep")
	case "tree":
		spawn(false, "sleep")
		spawn(true, "sleep")
		spawn(false, "detach")
		time.Sleep(200 * time.Millisecond)
		fmt.Println("ready")
		time.Sleep(time.Hour)
	}
}
