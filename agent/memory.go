package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// The agent is PID 1 of every box and idle nearly all of its life: what it holds is paid once
// per box. Its binary's pages come from one host file bind-mounted into every box, so they are
// shared page cache (PSS splits them over the boxes); what is its own is the Go heap, stacks and
// runtime structures, kept small here.

const (
	// How long the agent must have had no connection before it hands its free memory back to the
	// kernel: long enough that a burst of execs does not pay a full GC between each two.
	idleRelease = time.Second
	// A soft limit on the Go runtime's memory: the GC works harder near it, never fails an
	// allocation (a 1 MiB frame still gets its buffer).
	memoryLimit = 8 << 20
)

// tuneRuntime sets the runtime for an idle agent, unless the box's environment says otherwise
// (GOMAXPROCS, GOGC, GOMEMLIMIT: the Go runtime reads them itself). One P: an exec is a few
// goroutines handing work to each other, which then happens on one thread instead of waking
// another (a cross-thread wakeup costs most on a loaded machine); a blocking syscall (a fork)
// still gets its own thread. GC at 50% growth instead of 100%: a small heap stays small.
func tuneRuntime() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

// idleTracker counts the host's open connections and, once none has been open for
// idleRelease, returns the memory the last burst freed to the kernel (debug.FreeOSMemory: a GC,
// then the free pages released), so an idle box's agent goes back to its resting size.
type idleTracker struct {
	mu    sync.Mutex
	open  int
	timer *time.Timer
}

func newIdleTracker() *idleTracker {
	t := &idleTracker{}
	// Also once after start: what starting took (the command's spawn, the listener) is freed too.
	t.timer = time.AfterFunc(idleRelease, t.release)
	return t
}

// enter and leave bracket a busy spell (a connection's hello, an exec); nil: nothing tracked.
func (t *idleTracker) enter() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.open++
	t.timer.Stop()
	t.mu.Unlock()
}

func (t *idleTracker) leave() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.open--
	if t.open == 0 {
		t.timer.Reset(idleRelease)
	}
	t.mu.Unlock()
}

func (t *idleTracker) release() {
	t.mu.Lock()
	idle := t.open == 0
	t.mu.Unlock()
	if idle {
		// Two collections: the first moves outBufs' buffers to the pool's victim cache, the second
		// (FreeOSMemory's own) drops them; then the free pages go back to the kernel.
		runtime.GC()
		debug.FreeOSMemory()
	}
}

// outBufs are the buffers an exec's output is read into, one pipe read each (a pipe holds 64
// KiB): reused across execs instead of two new ones per exec for the GC to collect.
var outBufs = sync.Pool{New: func() any { b := make([]byte, 64*1024); return &b }}
