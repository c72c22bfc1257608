package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// The Go runtime makes an OS thread whenever it needs one more (a goroutine blocked in a syscall
// while others wait to run), and a thread it cannot make is fatal: "runtime: failed to create
// new OS thread ... fatal error: newosproc". The box's pids limit counts the agent's threads with
// the box's processes, so a box whose processes filled the limit (a fork bomb, a `make -j`
// without bound) killed its agent, PID 1, and with it the whole box. So the agent makes its
// threads while the box is empty, and keeps them: the runtime reuses an idle thread before it
// makes a new one, and never ends them.

// threadReserve is how many threads the agent makes at start beyond the runtime's own (5 or 6):
// enough for the syscalls a busy agent has in flight at once (an exec flood beside a fork bomb
// needed 8 threads in all here). At most a third of what the pids limit leaves, so a box with a
// small limit keeps its room: a limit of 10 leaves the command and one exec room, as before.
const threadReserve = 8

// reserveThreads makes up to threadReserve idle threads: each of as many goroutines holds its own
// thread (LockOSThread) until all hold one, then lets it go back to the runtime's idle list.
func reserveThreads() {
	n := threadReserve
	if free, ok := pidsFree(); ok && free/3 < n {
		n = free / 3
	}
	var held, release sync.WaitGroup
	held.Add(n)
	release.Add(1)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			held.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	release.Done()
}

// pidsFree is how many more tasks the box's pids limit allows now (cgroup v2, then v1); false
// when there is no limit or it cannot be read.
func pidsFree() (int, bool) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids"} {
		max, err1 := os.ReadFile(dir + "/pids.max")
		cur, err2 := os.ReadFile(dir + "/pids.current")
		if err1 != nil || err2 != nil {
			continue
		}
		m, err := strconv.Atoi(strings.TrimSpace(string(max)))
		if err != nil {
			return 0, false // "max": no limit
		}
		c, err := strconv.Atoi(strings.TrimSpace(string(cur)))
		if err != nil {
			return 0, false
		}
		if m-c < 0 {
			return 0, true
		}
		return m - c, true
	}
	return 0, false
}
