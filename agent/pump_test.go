package main

import (
	"bytes"
	"io"
	"syscall"
	"testing"
	"time"
)

// outputPipe is an exec's output pipe as startExec makes it, holding want (written, then
// closed unless keepOpen) for pump to read, and the frames pump writes.
func outputPipe(t *testing.T, want []byte, keepOpen bool) (*execProc, *bytes.Buffer, int) {
	t.Helper()
	r, w, err := childPipe(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for off := 0; off < len(want); {
		n, err := syscall.Write(w, want[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if !keepOpen {
		syscall.Close(w)
		w = -1
	} else {
		t.Cleanup(func() { syscall.Close(w) })
	}
	frames := &bytes.Buffer{}
	ex := &execProc{fw: &frameWriter{w: frames}, outs: nil}
	ex.outs = append(ex.outs, r)
	return ex, frames, w
}

// pumpExited runs pump as it runs once the process exited at `at`.
func pumpExited(ex *execProc, at time.Time) {
	ex.exitedAt.Store(at.UnixNano())
	ex.exited.Store(true)
	ex.readers.Add(1)
	ex.pump(ex.outs[0], fStdout)
}

// stdoutOf is the stdout the frames carry.
func stdoutOf(t *testing.T, frames *bytes.Buffer) []byte {
	t.Helper()
	var out []byte
	hdr := make([]byte, 5)
	for {
		f, err := readFrame(frames, hdr)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.typ != fStdout {
			t.Fatalf("frame type %d, want stdout", f.typ)
		}
		out = append(out, f.payload...)
	}
}

// What the process wrote before its exit is all read, however long the host took to take the
// output before it: the deadlines after the exit bound only other processes' output. Here the
// exit was drainMax ago and a pipe's worth is left (the host was slow to read a stream): the
// agent read none of it before, so the host got its output short (a 1 MiB exec lost 20 KiB).
func TestPumpReadsWhatTheProcessLeftAfterDrainMax(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 4000) // 64,000 bytes: within a pipe
	ex, frames, _ := outputPipe(t, want, false)
	pumpExited(ex, time.Now().Add(-2*drainMax))
	if got := stdoutOf(t, frames); !bytes.Equal(got, want) {
		t.Fatalf("stdout: %d bytes, want %d", len(got), len(want))
	}
}

// The same when the deadline wait() sets to wake a read has passed before pump reads (its
// goroutine was not scheduled in time): the read that finds data must not be refused by it.
func TestPumpReadsPastAWakingDeadline(t *testing.T) {
	want := bytes.Repeat([]byte{'x'}, 50_000)
	ex, frames, _ := outputPipe(t, want, false)
	_ = ex.outs[0].SetReadDeadline(time.Now().Add(-time.Second))
	pumpExited(ex, time.Now())
	if got := stdoutOf(t, frames); !bytes.Equal(got, want) {
		t.Fatalf("stdout: %d bytes, want %d", len(got), len(want))
	}
}

// A process that outlived the exec and keeps the pipe open and full does not hold the exec:
// pump reads what was there and returns once drainMax after the exit has passed.
func TestPumpLeavesAPipeAnEscapedProcessKeepsFull(t *testing.T) {
	want := bytes.Repeat([]byte{'y'}, 60_000)
	ex, frames, w := outputPipe(t, want, true)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the escaped writer: refills the pipe as pump empties it
		b := bytes.Repeat([]byte{'z'}, 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := syscall.Write(w, b); err != nil {
				return
			}
		}
	}()
	pumpExited(ex, time.Now().Add(-2*drainMax))
	if got := stdoutOf(t, frames); !bytes.HasPrefix(got, want) {
		t.Fatalf("stdout: %d bytes, not starting with the %d the process left", len(got), len(want))
	}
}
