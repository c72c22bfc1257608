package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// After the process exited, how long its output may stay silent before the agent stops
	// reading it: what the process wrote is already in the pipes; anything still holding them
	// open (an escaped background process) must not hold up the exit.
	drainIdle = 20 * time.Millisecond
	// The most the output is still read after the exit, whatever keeps writing.
	drainMax  = 2 * time.Second
	helloWait = 10 * time.Second
	// How long a kept connection may wait for its next START (the host drops idle ones sooner).
	keepIdle = 60 * time.Second
	// frameBuf: the read buffer of a host connection, enough for a HELLO and a START together.
	frameBuf = 4096
)

// hostConn is a connection from the host: TCP, straight from the host to the box's address
// (Docker) or through the orchestrator's port-forward (Kubernetes); it can half-close.
type hostConn interface {
	net.Conn
	CloseWrite() error
}

// serve accepts the host's connections; each must present token (the per-box secret).
func (a *agent) serve(ln net.Listener, token string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		hc, ok := c.(hostConn)
		if !ok {
			_ = c.Close()
			continue
		}
		go a.handle(hc, token)
	}
}

func (a *agent) handle(c hostConn, token string) {
	a.idle.enter()
	defer a.idle.leave()
	defer c.Close()
	fw := &frameWriter{w: c}
	fail := func(code, field, msg string) {
		_ = fw.writeJSON(fError, errorResp{Code: code, Field: field, Message: msg})
	}
	// Only the host: any process of the box can connect (it shares the box's network
	// namespace), so the HELLO must carry the token, which no box process can read.
	if token == "" {
		fail("forbidden", "", "the sbx agent serves the host only")
		return
	}
	hdr := make([]byte, 5)
	// Frames are read through a buffer: a HELLO and the START sent with it (a kept connection's
	// next exec), headers and payloads, come in one read instead of one each.
	in := bufio.NewReaderSize(c, frameBuf)
	_ = c.SetReadDeadline(time.Now().Add(helloWait))
	f, err := readFrame(in, hdr)
	if err != nil {
		return
	}
	if f.typ != fHello {
		fail("protocol", "", "the first frame must be HELLO")
		return
	}
	var hello helloReq
	if err := json.Unmarshal(f.payload, &hello); err != nil {
		fail("protocol", "", "bad HELLO: "+err.Error())
		return
	}
	if !hello.presents(token, c.LocalAddr().String()) {
		fail("forbidden", "", "the sbx agent serves the host only: wrong or missing token")
		return
	}
	speaks := false
	for _, v := range hello.Versions {
		if v == ProtocolVersion {
			speaks = true
		}
	}
	if !speaks {
		fail("version", "", fmt.Sprintf("sbx-agent %s speaks protocol %d; the host offered %v", AgentVersion, ProtocolVersion, hello.Versions))
		return
	}
	if err := fw.writeJSON(fHelloOK, helloResp{Version: ProtocolVersion, Versions: []int{ProtocolVersion}, Agent: AgentVersion, Pid: selfPid}); err != nil {
		return
	}
	f, err = readFrame(in, hdr)
	if err != nil {
		return // a probe: HELLO only
	}
	_ = c.SetReadDeadline(time.Time{})
	if f.typ == fConfigure {
		var req struct {
			Env map[string]string `json:"env"`
		}
		if err := json.Unmarshal(f.payload, &req); err != nil {
			fail("protocol", "", "bad CONFIGURE: "+err.Error())
			return
		}
		for k := range req.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(req.Env[k], 0) {
				fail("invalid_argument", "env", fmt.Sprintf("env: %q is not a variable name with a C-string value", k))
				return
			}
		}
		a.configure(req.Env)
		_ = fw.writeJSON(fConfigured, struct{}{})
		return
	}
	// A connection may carry several execs, one after another: each START that says keep leaves
	// the connection open after its EXIT for the next START (the host's idle connection to the
	// box, which spares it a connect and a HELLO per exec).
	for {
		if f.typ != fStart {
			fail("protocol", "", "expected START")
			return
		}
		var req startReq
		if err := json.Unmarshal(f.payload, &req); err != nil {
			fail("protocol", "", "bad START: "+err.Error())
			return
		}
		ex, e := a.startExec(req, fw, c)
		if e != nil {
			_ = fw.writeJSON(fError, e)
			return
		}
		next, ok := ex.serve(c, in, hdr)
		if !ok {
			return
		}
		f = next
	}
}

// serve reads the host's frames for a running exec. It returns the next START when the exec
// was kept (its START said keep) and the host sent one after its EXIT; false when the
// connection is done.
func (ex *execProc) serve(c hostConn, in io.Reader, hdr []byte) (frame, bool) {
	for {
		f, err := readFrame(in, hdr)
		if err != nil {
			break
		}
		switch f.typ {
		case fHello:
			// On a kept connection the host sends a HELLO with its next START, answered before
			// the START is read: the host learns the agent is still there (or gives up on a
			// silent connection before anything ran).
			if ex.keep && ex.exited.Load() {
				_ = ex.fw.writeJSON(fHelloOK, helloResp{Version: ProtocolVersion, Versions: []int{ProtocolVersion}, Agent: AgentVersion, Pid: selfPid})
			}
		case fStart:
			if !ex.keep {
				continue
			}
			// The host sends the next START only once it read EXIT, written just before done.
			<-ex.done
			ex.a.idle.enter()
			_ = c.SetReadDeadline(time.Time{})
			return f, true
		case fStdin:
			ex.queueStdin(f.payload, false)
		case fStdinEOF:
			ex.queueStdin(nil, true)
		case fResize:
			var s sizeReq
			if json.Unmarshal(f.payload, &s) == nil && ex.master != nil && s.Cols > 0 && s.Rows > 0 {
				_ = setWinsize(int(ex.master.Fd()), s.Cols, s.Rows)
			}
		case fKill:
			ex.kill()
		case fSignal:
			var s struct {
				Signal int `json:"signal"`
			}
			if json.Unmarshal(f.payload, &s) == nil && s.Signal > 0 && s.Signal < 65 && !ex.exited.Load() {
				_ = syscall.Kill(ex.pid, syscall.Signal(s.Signal))
			}
		}
	}
	// The host went away (or closed after EXIT): an exec nobody can see any more is killed.
	if !ex.exited.Load() {
		ex.kill()
	}
	<-ex.done
	if ex.keep {
		ex.a.idle.enter() // balances the leave of a kept exec's end: handle's deferred leave follows
	}
	return frame{}, false
}

type stdinItem struct {
	data []byte
	eof  bool
}

type execProc struct {
	a      *agent
	pid    int
	master *os.File
	stdin  *os.File // pipe to the process (nil without stdin; the master with a tty)
	outs   []*os.File
	fw     *frameWriter
	conn   hostConn
	// keep: the host keeps the connection for another exec after EXIT (START's keep).
	keep bool

	exited   atomic.Bool
	exitedAt atomic.Int64
	killed   atomic.Bool
	status   chan syscall.WaitStatus
	done     chan struct{}
	readers  sync.WaitGroup

	qmu    sync.Mutex
	queue  []stdinItem
	qready chan struct{}
}

func (a *agent) startExec(req startReq, fw *frameWriter, conn hostConn) (*execProc, *errorResp) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, &errorResp{Code: "invalid_argument", Field: "cmd", Message: "cmd: must be a non-empty array"}
	}
	userSpec := req.User
	if userSpec == "" {
		userSpec = a.cfg.user
	}
	cred, err := lookupUser(userSpec)
	if err != nil {
		return nil, &errorResp{Code: "invalid_argument", Field: "user", Message: err.Error()}
	}
	if uid := selfUid; uid != 0 && (cred.uid != uint32(uid) || cred.gid != uint32(selfGid)) {
		// Kubernetes without a box user: the agent is the image's user and cannot switch.
		return nil, &errorResp{Code: "not_available", Field: "user", Message: fmt.Sprintf(
			"user %q: the box runs as uid %d, not root, so its processes cannot switch users; create the box with a user to run execs as others", userSpec, uid)}
	}
	env := a.envFor(req.Env, cred, req.Tty)
	dir := req.WorkDir
	if dir == "" {
		dir = a.defaultDir
	}
	path, err := lookPath(req.Argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		if e := badWorkDir(dir); e != nil {
			return nil, e
		}
		return nil, &errorResp{Code: "not_found", Field: "cmd", Message: err.Error()}
	}

	ex := &execProc{a: a, fw: fw, conn: conn, keep: req.Keep, status: make(chan syscall.WaitStatus, 1), done: make(chan struct{}), qready: make(chan struct{}, 1)}
	var childFile *os.File // the terminal's slave
	var childFds []int     // the pipes' ends for the process
	var files [3]uintptr
	if req.Tty {
		m, s, err := openPty(req.Cols, req.Rows, cred.uid, cred.gid)
		if err != nil {
			return nil, &errorResp{Code: "internal", Message: err.Error()}
		}
		ex.master, ex.stdin, ex.outs = m, m, []*os.File{m}
		childFile = s
		files = [3]uintptr{s.Fd(), s.Fd(), s.Fd()}
	} else {
		closeAll := func(fs ...*os.File) {
			for _, f := range fs {
				if f != nil {
					f.Close()
				}
			}
			for _, fd := range childFds {
				syscall.Close(fd)
			}
		}
		inFd := a.devNull.Fd()
		if req.Stdin {
			w, r, err := childPipe(false)
			if err != nil {
				return nil, &errorResp{Code: "internal", Message: err.Error()}
			}
			ex.stdin = w
			inFd = uintptr(r)
			childFds = append(childFds, r)
		}
		outR, outW, err := childPipe(true)
		if err != nil {
			closeAll(ex.stdin)
			return nil, &errorResp{Code: "internal", Message: err.Error()}
		}
		childFds = append(childFds, outW)
		errR, errW, err := childPipe(true)
		if err != nil {
			closeAll(ex.stdin, outR)
			return nil, &errorResp{Code: "internal", Message: err.Error()}
		}
		childFds = append(childFds, errW)
		ex.outs = []*os.File{outR, errR}
		files = [3]uintptr{inFd, uintptr(outW), uintptr(errW)}
	}
	closeChild := func() {
		if childFile != nil {
			childFile.Close()
		}
		for _, fd := range childFds {
			syscall.Close(fd)
		}
	}
	pid, err := a.start(spawnSpec{path: path, argv: req.Argv, env: env, dir: dir, cred: cred, files: files, tty: req.Tty}, func(ws syscall.WaitStatus) {
		ex.status <- ws
	})
	closeChild()
	if err != nil {
		if ex.stdin != nil && ex.stdin != ex.master {
			ex.stdin.Close()
		}
		for _, f := range ex.outs {
			f.Close()
		}
		// The working directory is looked at only now: the process's chdir is the check that
		// costs nothing when it succeeds.
		if e := badWorkDir(dir); e != nil {
			return nil, e
		}
		code, field := "internal", ""
		if errors.Is(err, syscall.ENOENT) {
			code, field = "not_found", "cmd"
		}
		return nil, &errorResp{Code: code, Field: field, Message: fmt.Sprintf("exec %s: %v", path, err)}
	}
	ex.pid = pid
	a.execs.Store(pid, ex)
	_ = fw.writeJSON(fStarted, map[string]int{"pid": pid})

	types := []byte{fStdout, fStderr}
	for i, f := range ex.outs {
		ex.readers.Add(1)
		go ex.pump(f, types[i])
	}
	if ex.stdin != nil {
		go ex.writeStdin()
	}
	go ex.wait()
	return ex, nil
}

// badWorkDir is the error of an exec whose working directory is missing or not a directory;
// nil when it is one.
func badWorkDir(dir string) *errorResp {
	st, err := os.Stat(dir)
	if err == nil && st.IsDir() {
		return nil
	}
	why := "not a directory"
	if err != nil {
		why = err.Error()
	}
	return &errorResp{Code: "invalid_argument", Field: "workDir", Message: fmt.Sprintf("chdir to %s: %s", dir, why)}
}

// childPipe is a pipe between the agent and a process it starts: the agent's end an *os.File
// in Go's poller (non-blocking, so reads take deadlines), the process's end a blocking
// descriptor, as programs expect, that the agent closes once the process has it; both
// close-on-exec. One pipe2 and three fcntl and an epoll_ctl, where os.Pipe and Fd() on the
// child's end take six fcntl and three epoll_ctl (two more at close).
func childPipe(agentReads bool) (agentEnd *os.File, childEnd int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, -1, os.NewSyscallError("pipe2", err)
	}
	mine, theirs := p[1], p[0]
	if agentReads {
		mine, theirs = p[0], p[1]
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(theirs), syscall.F_SETFL, 0); e != 0 {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, -1, os.NewSyscallError("fcntl", e)
	}
	// NewFile sees O_NONBLOCK and puts the descriptor in the poller.
	return os.NewFile(uintptr(mine), "|0"), theirs, nil
}

// pump copies one output of the process to the host. What the process wrote before it exited is
// in the pipe when it exits (at most the pipe's capacity): that much is read whatever the clock
// says, however long the host takes to accept it. The deadlines after that bound only output of
// processes that outlived it (a background job still holding the pipe): read while it keeps
// coming within drainIdle, for at most drainMax after the exit.
func (ex *execProc) pump(f *os.File, typ byte) {
	defer ex.readers.Done()
	bp := outBufs.Get().(*[]byte)
	defer outBufs.Put(bp)
	buf := *bp
	broken := false
	owed := -1 // after the exit: what is still read without a deadline; -1 before the exit
	for {
		at := ex.exitedAt.Load()
		if at != 0 && owed < 0 {
			owed = bufferedMax(f)
		}
		var n int
		var err error
		if owed > 0 {
			n, err = readNow(f, buf[:min(len(buf), owed)])
			owed -= n
			if err == errPipeEmpty {
				owed = 0
				continue
			}
		} else {
			if at != 0 {
				d := time.Now().Add(drainIdle)
				if max := time.Unix(0, at).Add(drainMax); d.After(max) {
					d = max
				}
				_ = f.SetReadDeadline(d)
			}
			n, err = f.Read(buf)
		}
		if n > 0 && !broken {
			if ex.fw.write(typ, buf[:n]) != nil {
				broken = true // keep reading: the process must not block on a full pipe
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && owed < 0 {
			continue // wait() woke a read that had nothing yet: the exit, read what it left
		}
		if err != nil {
			return // EOF, EIO (a terminal whose last holder closed it), or the drain deadline
		}
	}
}

// errPipeEmpty: readNow found nothing to read.
var errPipeEmpty = errors.New("nothing to read")

// defaultBuffered bounds what a terminal holds unread (the kernel's tty buffer limit, 64 KiB).
const defaultBuffered = 64 * 1024

// bufferedMax is the most f can hold unread: a pipe's capacity (which its writer may have
// raised, up to fs.pipe-max-size), else defaultBuffered.
func bufferedMax(f *os.File) int {
	n := 0
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETPIPE_SZ, 0)
			if e == 0 {
				n = int(r)
			}
		})
	}
	return max(n, defaultBuffered)
}

// readNow reads what f holds now, without waiting and whatever its deadline: a deadline that
// passed fails even a read that would find data (Go checks it first), and one passes while the
// goroutine is not scheduled, which on a loaded machine is longer than drainIdle.
func readNow(f *os.File, b []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	for {
		_ = f.SetReadDeadline(time.Time{})
		var n int
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = syscall.Read(int(fd), b)
				if rerr != syscall.EINTR {
					return true // done, waiting or not: readNow never waits
				}
			}
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // wait() set its deadline between the clearing and the read
		}
		switch {
		case err != nil:
			return 0, err
		case rerr == syscall.EAGAIN:
			return 0, errPipeEmpty
		case rerr != nil:
			return 0, rerr
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (ex *execProc) queueStdin(b []byte, eof bool) {
	if ex.stdin == nil {
		if !eof {
			ex.ack(len(b))
		}
		return
	}
	ex.qmu.Lock()
	ex.queue = append(ex.queue, stdinItem{data: b, eof: eof})
	ex.qmu.Unlock()
	select {
	case ex.qready <- struct{}{}:
	default:
	}
}

func (ex *execProc) ack(n int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	_ = ex.fw.write(fStdinAck, b[:])
}

// writeStdin hands stdin to the process in order, acknowledging each frame once written, so
// the host never has more than the window in flight; control frames are never stuck behind it.
func (ex *execProc) writeStdin() {
	tty := ex.master != nil
	closed := false
	for {
		select {
		case <-ex.qready:
		case <-ex.done:
			if !tty && !closed {
				ex.stdin.Close()
			}
			return
		}
		for {
			ex.qmu.Lock()
			if len(ex.queue) == 0 {
				ex.qmu.Unlock()
				break
			}
			it := ex.queue[0]
			ex.queue = ex.queue[1:]
			ex.qmu.Unlock()
			if it.eof {
				if tty {
					// A terminal has no half-close: EOF is ^D, as the engine sends it.
					_, _ = ex.stdin.Write([]byte{4})
				} else if !closed {
					closed = true
					ex.stdin.Close()
				}
				continue
			}
			if !closed {
				if _, err := ex.stdin.Write(it.data); err != nil && !tty {
					closed = true
					ex.stdin.Close()
				}
			}
			ex.ack(len(it.data))
		}
	}
}

func (ex *execProc) kill() {
	if ex.killed.Swap(true) || ex.exited.Load() {
		return
	}
	killTree(ex.pid)
}

func (ex *execProc) wait() {
	ws := <-ex.status
	ex.exited.Store(true)
	ex.exitedAt.Store(time.Now().UnixNano())
	ex.a.execs.Delete(ex.pid)
	// Wakes a read still waiting for output (the pipe may be held open by a process that
	// outlived this one): pump reads what is left, then gives later output drainIdle.
	for _, f := range ex.outs {
		_ = f.SetReadDeadline(time.Now())
	}
	ex.readers.Wait()
	for _, f := range ex.outs {
		f.Close()
	}
	resp := exitResp{ExitCode: exitCodeOf(ws), Killed: ex.killed.Load()}
	if ws.Signaled() {
		resp.Signal = signalName(ws.Signal())
	}
	if ex.keep {
		ex.a.idle.leave() // a kept connection waiting for its next START is idle
	}
	_ = ex.fw.writeJSON(fExit, resp)
	if ex.keep {
		// The host's idle connection: it gives it up before this (agent-client.ts), or it is cut.
		_ = ex.conn.SetReadDeadline(time.Now().Add(keepIdle))
	} else {
		_ = ex.conn.CloseWrite()
		// The host closes its side once it read EXIT; do not wait for one that does not.
		_ = ex.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	close(ex.done)
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU", syscall.SIGSYS: "SIGSYS",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}

// helloProof is what a HELLO presents instead of the token: HMAC-SHA256 keyed with the token
// over the address the connection reached (host:port, as the agent's end of it sees it, which
// is the address the host dialled: nothing rewrites the destination on the way in).
func helloProof(token, addr string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("sbx-agent-hello " + addr))
	return hex.EncodeToString(m.Sum(nil))
}

// presents says whether the HELLO carries the token, or a proof of it for this connection's
// address; both compared in constant time.
func (h helloReq) presents(token, localAddr string) bool {
	if h.Proof != "" {
		return subtle.ConstantTimeCompare([]byte(h.Proof), []byte(helloProof(token, localAddr))) == 1
	}
	return subtle.ConstantTimeCompare([]byte(h.Token), []byte(token)) == 1
}
