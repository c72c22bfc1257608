package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

type agent struct {
	cfg     initConfig
	spawner *spawner
	// envMu guards baseEnv: CONFIGURE replaces variables while execs and heartbeats read them.
	envMu      sync.RWMutex
	baseEnv    []string
	defaultDir string
	devNull    *os.File

	// procMu is held across a fork and the registration of its waiter, and around each reap,
	// so the reaper never takes an exit nobody is waiting for yet.
	procMu  sync.Mutex
	waiters map[int]func(syscall.WaitStatus)

	mainPid atomic.Int64
	execs   sync.Map // pid -> *execProc, the running execs
	idle    *idleTracker
}

func newAgent(cfg initConfig) *agent {
	a := &agent{cfg: cfg, waiters: map[int]func(syscall.WaitStatus){}, idle: newIdleTracker()}
	a.spawner = newSpawner()
	for _, kv := range os.Environ() {
		// The TCP listener's secret is the agent's alone: no process of the box inherits it.
		if strings.HasPrefix(kv, tokenEnv+"=") {
			continue
		}
		// The engine sets HOME from the container's user, which is root when the agent is
		// injected: the runtime says --home when the box did not set HOME itself, and each
		// process then gets its own user's home, as the engine gives it.
		if cfg.home && strings.HasPrefix(kv, "HOME=") {
			continue
		}
		a.baseEnv = append(a.baseEnv, kv)
	}
	a.defaultDir, _ = os.Getwd()
	if a.defaultDir == "" {
		a.defaultDir = "/"
	}
	a.devNull, _ = os.Open(os.DevNull)
	return a
}

func runInit(cfg initConfig) int {
	tuneRuntime()
	// Before the box's command starts: its processes may fill the pids limit later (threads.go).
	reserveThreads()
	a := newAgent(cfg)
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	// Reap what was already there (nothing, normally; a box restarted by the engine is new).
	a.reap()

	// PID 1 is not dumpable: its memory and initial environment (where the TCP listener's token
	// was) are then closed to box processes of the same uid, as when the agent is root.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)

	// Bind before the box's command starts (a command that took the agent's port first would get
	// the host's hello, token and all, and stand in for the agent), serve after: a host that
	// connects in between waits in the backlog, and the command's failure to start still comes
	// before any hello is answered (start reports it).
	// The OOM-kill counter is read before the command starts; the token (read before the listener
	// takes it out of the environment) proves to the host that the agent wrote the line (oom.go).
	oom := newOOMWatch(agentToken())
	var tcpLn net.Listener
	var token string
	if cfg.listen != "" {
		ln, tok, err := listenTCP(cfg.listen)
		if err != nil {
			// Still init: the host finds nothing listening and uses the engine's exec.
			fmt.Fprintf(os.Stderr, "sbx-agent: no exec listener on %s (%v); init only\n", cfg.listen, err)
		} else {
			tcpLn, token = ln, tok
		}
	}

	mainDone := make(chan syscall.WaitStatus, 1)
	if len(cfg.cmd) > 0 {
		if code, err := a.startMain(mainDone); err != nil {
			fmt.Fprintf(os.Stderr, "sbx-agent: cannot start %q: %v\n", cfg.cmd[0], err)
			return code
		}
	}
	if tcpLn != nil {
		go a.serve(tcpLn, token)
	}
	go a.heartbeats()

	for {
		select {
		case ws := <-mainDone:
			code := exitCodeOf(ws)
			// Killed by SIGKILL, or a shell whose child was (it exits 128+9 too): the OOM killer's, when
			// the box's counter grew.
			if code == 128+int(syscall.SIGKILL) {
				oom.report(os.Stderr)
			}
			return code
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if sig == syscall.SIGCHLD {
				a.reap()
				continue
			}
			if pid := int(a.mainPid.Load()); pid > 0 {
				_ = syscall.Kill(pid, sig)
			} else if sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGQUIT || sig == syscall.SIGHUP {
				// No command: waiting was all there was to do.
				return 0
			}
		}
	}
}

func exitCodeOf(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// reap collects every exited child: the execs' and the command's to their waiters, orphans
// reparented to PID 1 just so they leave no zombie.
func (a *agent) reap() {
	for {
		var ws syscall.WaitStatus
		a.procMu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		var cb func(syscall.WaitStatus)
		if pid > 0 {
			cb = a.waiters[pid]
			delete(a.waiters, pid)
		}
		a.procMu.Unlock()
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if cb != nil {
			cb(ws)
		}
	}
}

func (a *agent) startMain(done chan syscall.WaitStatus) (int, error) {
	cmd := a.cfg.cmd
	cred, err := lookupUser(a.cfg.user)
	if err != nil {
		return 126, err
	}
	env := a.envFor(nil, cred, false)
	path, err := lookPath(cmd[0], envValue(env, "PATH"), a.defaultDir)
	if err != nil {
		return 127, err
	}
	pid, err := a.start(spawnSpec{path: path, argv: cmd, env: env, dir: a.defaultDir, cred: cred, files: [3]uintptr{0, 1, 2}, direct: true}, func(ws syscall.WaitStatus) {
		done <- ws
	})
	if err != nil {
		return 126, err
	}
	a.mainPid.Store(int64(pid))
	return 0, nil
}

// envFor is the environment of a process: the box's, the exec's over it, HOME from the
// user's passwd entry when neither sets it, TERM=xterm on a terminal (as the engine does).
func (a *agent) envFor(extra map[string]string, cred credential, tty bool) []string {
	base := a.env()
	env := make([]string, 0, len(base)+len(extra)+2)
	seen := map[string]bool{}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := extra[k]; ok {
			env = append(env, k+"="+v)
		} else {
			env = append(env, kv)
		}
		seen[k] = true
	}
	for k, v := range extra {
		if !seen[k] {
			env = append(env, k+"="+v)
			seen[k] = true
		}
	}
	if !seen["HOME"] {
		home := cred.home
		if home == "" {
			home = "/"
		}
		env = append(env, "HOME="+home)
	}
	if tty && !seen["TERM"] {
		env = append(env, "TERM=xterm")
	}
	return env
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

type notFoundError struct{ name string }

func (e notFoundError) Error() string {
	if strings.Contains(e.name, "/") {
		return fmt.Sprintf("stat %s: no such file or directory", e.name)
	}
	return fmt.Sprintf("%q: executable file not found in $PATH", e.name)
}

// lookPath finds an executable as the engine does: a name with a slash as it is (relative
// to the working directory), else the first match in PATH.
func lookPath(name, path, dir string) (string, error) {
	check := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			return "", notFoundError{name}
		}
		return p, nil
	}
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if check(p) {
			return p, nil
		}
	}
	return "", notFoundError{name}
}

// tokenEnv holds the secret a peer must present in its HELLO: set in the container's or pod's
// spec by the runtime, so only who may read the box's spec on the host knows it; the agent drops
// it from every environment it gives and is not dumpable (its /proc/1/environ is closed).
const tokenEnv = "SBX_AGENT_TOKEN"

// listenTCP listens where the host connects: the box's every address on Docker (the host dials
// its bridge address; the wildcard also keeps any box process from binding the port on one
// address), the pod's loopback on Kubernetes (the API server's port-forward dials localhost
// inside the pod). Go sets SO_REUSEADDR, not SO_REUSEPORT: no other socket can share the port.
func listenTCP(addr string) (net.Listener, string, error) {
	token := agentToken()
	if token == "" {
		return nil, "", fmt.Errorf("%s must hold a secret of at least 32 characters", tokenEnv)
	}
	_ = os.Unsetenv(tokenEnv)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return ln, token, nil
}

// agentToken is the box's secret, or "" when there is none fit to be one (under 32 characters).
func agentToken() string {
	if token := os.Getenv(tokenEnv); len(token) >= 32 {
		return token
	}
	return ""
}

// env is the box's environment as it stands (a copy).
func (a *agent) env() []string {
	a.envMu.RLock()
	defer a.envMu.RUnlock()
	return append([]string(nil), a.baseEnv...)
}

// configure sets variables of the box's environment for every later exec and the heartbeat.
func (a *agent) configure(vars map[string]string) {
	a.envMu.Lock()
	defer a.envMu.Unlock()
	for k, v := range vars {
		replaced := false
		for i, kv := range a.baseEnv {
			if name, _, _ := strings.Cut(kv, "="); name == k {
				a.baseEnv[i] = k + "=" + v
				replaced = true
			}
		}
		if !replaced {
			a.baseEnv = append(a.baseEnv, k+"="+v)
		}
	}
}
