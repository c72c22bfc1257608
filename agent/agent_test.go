package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf}
	if err := fw.write(fStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := fw.writeJSON(fExit, exitResp{ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 5)
	f, err := readFrame(&buf, hdr)
	if err != nil || f.typ != fStdout || string(f.payload) != "hello" {
		t.Fatalf("got %v %q %v", f.typ, f.payload, err)
	}
	f, err = readFrame(&buf, hdr)
	if err != nil || f.typ != fExit || string(f.payload) != `{"exitCode":3}` {
		t.Fatalf("got %v %q %v", f.typ, f.payload, err)
	}
	big := append([]byte{fStdin, 0x7f, 0, 0, 0}, make([]byte, 10)...)
	if _, err := readFrame(bytes.NewReader(big), hdr); err == nil {
		t.Fatal("an oversized frame must be refused")
	}
}

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwdFile, groupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	defer func() { passwdFile, groupFile = "/etc/passwd", "/etc/group" }()
	os.WriteFile(passwdFile, []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"), 0o644)
	os.WriteFile(groupFile, []byte("root:x:0:\nsandbox:x:1000:\nextra:x:2000:sandbox,other\n"), 0o644)
	cases := []struct {
		spec     string
		uid, gid uint32
		groups   []uint32
		home     string
	}{
		{"", 0, 0, nil, "/root"},
		{"sandbox", 1000, 1000, []uint32{2000}, "/home/sandbox"},
		{"1000", 1000, 1000, []uint32{2000}, "/home/sandbox"},
		{"1000:0", 1000, 0, nil, "/home/sandbox"},
		{"sandbox:extra", 1000, 2000, nil, "/home/sandbox"},
		{"4242", 4242, 0, nil, "/"},
		{"4242:7", 4242, 7, nil, "/"},
	}
	for _, c := range cases {
		cred, err := lookupUser(c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if cred.uid != c.uid || cred.gid != c.gid || cred.home != c.home || len(cred.groups) != len(c.groups) {
			t.Fatalf("%q: got %+v", c.spec, cred)
		}
	}
	for _, bad := range []string{"bob", "sandbox:nogroup"} {
		if _, err := lookupUser(bad); err == nil || !strings.Contains(err.Error(), "unable to find") {
			t.Fatalf("%q: want an error, got %v", bad, err)
		}
	}
}

// The passwd and group files are kept between execs only while their stamp is unchanged and
// settled: every rewrite, in place or renamed in, of the same size or not, is seen.
func TestColonFilesSeeEveryRewrite(t *testing.T) {
	dir := t.TempDir()
	passwdFile, groupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	defer func() { passwdFile, groupFile = "/etc/passwd", "/etc/group"; colonSettle = 2 * time.Second }()
	os.WriteFile(groupFile, []byte("root:x:0:\n"), 0o644)
	uidOf := func() uint32 {
		t.Helper()
		cred, err := lookupUser("sandbox")
		if err != nil {
			t.Fatal(err)
		}
		return cred.uid
	}
	cached := func() bool {
		colonFiles.mu.Lock()
		defer colonFiles.mu.Unlock()
		_, ok := colonFiles.m[passwdFile]
		return ok
	}
	write := func(uid string) {
		os.WriteFile(passwdFile, []byte("sandbox:x:"+uid+":1000::/home/sandbox:/bin/sh\n"), 0o644)
	}

	// A fresh file (ctime within colonSettle) is read at every lookup and never kept: a rewrite of
	// the same size in the same clock tick leaves the same stamp.
	write("1000")
	if uidOf() != 1000 || cached() {
		t.Fatal("a fresh passwd file was kept")
	}
	write("1001")
	if uidOf() != 1001 {
		t.Fatal("an in-place rewrite of the same size was missed")
	}

	// Settled files are kept, and each change of stamp reads them again.
	colonSettle = 0
	if uidOf() != 1001 || !cached() {
		t.Fatal("a settled passwd file was not kept")
	}
	tmp := passwdFile + ".new"
	os.WriteFile(tmp, []byte("sandbox:x:1002:1000::/home/sandbox:/bin/sh\n"), 0o644)
	os.Rename(tmp, passwdFile) // a new inode, as useradd leaves it
	if uidOf() != 1002 {
		t.Fatal("a renamed-in passwd file was missed")
	}
	write("20000") // in place, another size
	if uidOf() != 20000 {
		t.Fatal("an in-place rewrite of another size was missed")
	}
	os.Remove(passwdFile)
	if _, err := lookupUser("sandbox"); err == nil || cached() {
		t.Fatalf("a removed passwd file still resolves: %v", err)
	}
}

func TestParseInit(t *testing.T) {
	cfg, err := parseInit([]string{"--user", "1000:1000", "--home", "--drop-caps", "5,7", "--", "sh", "-c", "x"})
	if err != nil || cfg.user != "1000:1000" || !cfg.home || len(cfg.dropCaps) != 2 || strings.Join(cfg.cmd, " ") != "sh -c x" {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := parseInit([]string{"--nope"}); err == nil {
		t.Fatal("unknown option accepted")
	}
	// No unix socket any more: pods created before say --socket '' (none), a path is refused.
	cfg, err = parseInit([]string{"--socket", "", "--listen", "0.0.0.0:43011", "--", "true"})
	if err != nil || cfg.listen != "0.0.0.0:43011" {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := parseInit([]string{"--socket", "/run/sbx-agent/agent.sock"}); err == nil {
		t.Fatal("a socket path accepted")
	}
}

// testAgent runs a reaper like init does.
func testAgent(t *testing.T) *agent {
	a := newAgent(initConfig{})
	if a.spawner.memfd < 0 {
		t.Skip("no memfd_create here")
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
				a.reap()
			case <-time.After(50 * time.Millisecond):
				a.reap()
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { signal.Stop(sigs); close(stop) })
	return a
}

// eachWay runs a test of the exec's spawn once for each way vforkStart has: clone3 (the target
// executed by the child itself) and the trampoline (where clone3 is refused).
func eachWay(t *testing.T, test func(t *testing.T, a *agent)) {
	t.Run("clone3", func(t *testing.T) {
		a := testAgent(t)
		if !a.spawner.vfork {
			t.Skip("execs start with syscall.ForkExec here")
		}
		test(t, a)
		if a.spawner.noClone3.Load() {
			t.Skip("clone3 with CLONE_CLEAR_SIGHAND is refused here: the trampoline's way ran")
		}
	})
	t.Run("trampoline", func(t *testing.T) {
		a := testAgent(t)
		a.spawner.noClone3.Store(true)
		test(t, a)
	})
}

func TestTrampolineMakesTheExecASubreaper(t *testing.T) { eachWay(t, testExecIsASubreaper) }

func testExecIsASubreaper(t *testing.T, a *agent) {
	done := make(chan syscall.WaitStatus, 1)
	cred := credential{uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
	// A double fork: the subshell exits at once, orphaning the sleep.
	pid, err := a.start(spawnSpec{path: "/bin/sh", argv: []string{"sh", "-c", "(sleep 30 &); sleep 30"}, env: []string{"PATH=/usr/bin:/bin"}, dir: "/", cred: cred, files: [3]uintptr{0, 1, 2}}, func(ws syscall.WaitStatus) { done <- ws })
	if err != nil {
		t.Fatal(err)
	}
	var orphan int
	for i := 0; i < 100 && orphan == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		for p, st := range readProcs() {
			if st.ppid == pid && st.comm == "sleep" && p != pid {
				cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
				if bytes.Contains(cmd, []byte("30")) {
					// two sleeps: the direct child and the reparented orphan both have ppid == pid
					orphan = p
				}
			}
		}
	}
	if orphan == 0 {
		t.Fatal("no sleep below the exec")
	}
	n := 0
	for _, st := range readProcs() {
		if st.ppid == pid && st.comm == "sleep" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want the orphan reparented to the exec (2 sleeps below it), got %d", n)
	}
	if killed := killTree(pid); killed < 3 {
		t.Fatalf("killTree found %d processes, want the shell and both sleeps", killed)
	}
	select {
	case ws := <-done:
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("exit %v", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exec did not die")
	}
	time.Sleep(100 * time.Millisecond)
	for p, st := range readProcs() {
		if st.session == pid && st.state != 'Z' {
			t.Fatalf("process %d of the exec survived", p)
		}
	}
}

func TestTrampolineReportsExecErrors(t *testing.T) { eachWay(t, testExecErrors) }

func testExecErrors(t *testing.T, a *agent) {
	done := make(chan syscall.WaitStatus, 1)
	cred := credential{uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
	dir := t.TempDir()
	noexec := filepath.Join(dir, "script")
	os.WriteFile(noexec, []byte("no shebang\n"), 0o755)
	_, err := a.start(spawnSpec{path: noexec, argv: []string{"script"}, dir: "/", cred: cred, files: [3]uintptr{0, 1, 2}}, func(ws syscall.WaitStatus) { done <- ws })
	if !errors.Is(err, syscall.ENOEXEC) {
		t.Fatalf("want ENOEXEC, got %v", err)
	}
	select {
	case ws := <-done:
		if ws.ExitStatus() != 127 {
			t.Fatalf("trampoline exit %v", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
}

func TestLookPath(t *testing.T) {
	if p, err := lookPath("sh", "/nope:/bin", "/"); err != nil || p != "/bin/sh" {
		t.Fatalf("%q %v", p, err)
	}
	if _, err := lookPath("no-such-cmd", "/bin", "/"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	if _, err := lookPath("/no/such", "/bin", "/"); err == nil {
		t.Fatal("missing path accepted")
	}
}

func TestConfigureReplacesAndAddsVariables(t *testing.T) {
	a := &agent{baseEnv: []string{"PATH=/bin", "SBX_TOKEN="}}
	a.configure(map[string]string{"SBX_TOKEN": "tok", "SBX_SANDBOX_ID": "sb-1"})
	env := a.env()
	if got := envValue(env, "SBX_TOKEN"); got != "tok" {
		t.Fatalf("SBX_TOKEN = %q, want tok", got)
	}
	if got := envValue(env, "SBX_SANDBOX_ID"); got != "sb-1" {
		t.Fatalf("SBX_SANDBOX_ID = %q, want sb-1", got)
	}
	if len(env) != 3 {
		t.Fatalf("env = %v: a replaced variable must not appear twice", env)
	}
	procEnv := a.envFor(map[string]string{"SBX_TOKEN": "exec"}, credential{}, false)
	if got := envValue(procEnv, "SBX_TOKEN"); got != "exec" {
		t.Fatalf("an exec's own env wins over the configured one, got %q", got)
	}
}

func TestTCPListenerWantsTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := newAgent(initConfig{})
	token := strings.Repeat("k", 40)
	go a.serve(ln, token)
	send := func(req helloReq) frame {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fw := &frameWriter{w: c}
		req.Versions = []int{ProtocolVersion}
		if err := fw.writeJSON(fHello, req); err != nil {
			t.Fatal(err)
		}
		f, err := readFrame(c, make([]byte, 5))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	hello := func(tok string) frame { return send(helloReq{Token: tok}) }
	for _, bad := range []string{"", "wrong", strings.Repeat("k", 39), token + "k"} {
		if f := hello(bad); f.typ != fError || !strings.Contains(string(f.payload), `"forbidden"`) {
			t.Fatalf("token %q: got %#x %s, want forbidden", bad, f.typ, f.payload)
		}
	}
	if f := hello(token); f.typ != fHelloOK {
		t.Fatalf("right token: got %#x %s", f.typ, f.payload)
	}
	// The proof in place of the token: bound to the address the connection reached.
	proof := func(p string) frame { return send(helloReq{Proof: p}) }
	if f := proof(helloProof(token, ln.Addr().String())); f.typ != fHelloOK {
		t.Fatalf("proof for this address: got %#x %s", f.typ, f.payload)
	}
	for _, bad := range []string{helloProof(token, "127.0.0.2:43011"), helloProof("wrong", ln.Addr().String()), token} {
		if f := proof(bad); f.typ != fError || !strings.Contains(string(f.payload), `"forbidden"`) {
			t.Fatalf("proof %q: got %#x %s, want forbidden", bad, f.typ, f.payload)
		}
	}
	// A listener without a token serves nobody.
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go a.serve(open, "")
	c, err := net.Dial("tcp", open.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if f, err := readFrame(c, make([]byte, 5)); err != nil || f.typ != fError || !strings.Contains(string(f.payload), `"forbidden"`) {
		t.Fatalf("no token: got %v %v", f, err)
	}
}

func TestTCPListenerNeedsALongToken(t *testing.T) {
	t.Setenv(tokenEnv, "short")
	if _, _, err := listenTCP("127.0.0.1:0"); err == nil {
		t.Fatal("a short token must be refused")
	}
	t.Setenv(tokenEnv, strings.Repeat("x", 32))
	ln, token, err := listenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if token != strings.Repeat("x", 32) || os.Getenv(tokenEnv) != "" {
		t.Fatalf("token %q, env after %q", token, os.Getenv(tokenEnv))
	}
}

func TestInstallCopiesThisBinary(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "bin", "sbx-agent")
	if err := install(dest); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dest)
	self, _ := os.Stat("/proc/self/exe")
	if err != nil || st.Mode().Perm() != 0o755 || st.Size() != self.Size() {
		t.Fatalf("installed %v %v, self %d bytes", st, err, self.Size())
	}
}

func TestKeptConnectionRunsExecsOneAfterAnother(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := testAgent(t)
	token := strings.Repeat("k", 40)
	go a.serve(ln, token)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fw := &frameWriter{w: c}
	hdr := make([]byte, 5)
	_ = fw.writeJSON(fHello, helloReq{Versions: []int{ProtocolVersion}, Token: token})
	if f, err := readFrame(c, hdr); err != nil || f.typ != fHelloOK {
		t.Fatalf("hello: %v %v", f, err)
	}
	// run sends one START and reads to its EXIT: the output and the exit's JSON.
	run := func(keep bool, word string) (string, string) {
		if err := fw.writeJSON(fStart, startReq{Argv: []string{"/bin/sh", "-c", "echo " + word}, Keep: keep}); err != nil {
			t.Fatal(err)
		}
		out := ""
		for {
			f, err := readFrame(c, hdr)
			if err != nil {
				t.Fatalf("%s: %v", word, err)
			}
			switch f.typ {
			case fStdout:
				out += string(f.payload)
			case fExit:
				return out, string(f.payload)
			case fError:
				t.Fatalf("%s: %s", word, f.payload)
			}
		}
	}
	for _, w := range []string{"one", "two"} {
		if out, exit := run(true, w); out != w+"\n" || exit != `{"exitCode":0}` {
			t.Fatalf("kept exec %s: %q %s", w, out, exit)
		}
		// The HELLO the host sends on its kept connection with the next START.
		_ = fw.writeJSON(fHello, helloReq{Versions: []int{ProtocolVersion}})
		if f, err := readFrame(c, hdr); err != nil || f.typ != fHelloOK {
			t.Fatalf("ping after %s: %v %v", w, f, err)
		}
	}
	// A START without keep ends the connection after its EXIT, as before keep existed.
	if out, _ := run(false, "three"); out != "three\n" {
		t.Fatalf("last exec: %q", out)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if f, err := readFrame(c, hdr); err == nil {
		t.Fatalf("want the connection closed after an exec without keep, got frame %#x", f.typ)
	}
}

// An exec started by vforkStart: no signal blocked, none caught, the ignored ones the agent's
// (clone3's CLONE_CLEAR_SIGHAND, or execve's reset after which the trampoline unblocks what the
// child kept blocked), the exec's credentials and groups; a failure before the target runs
// comes back as its errno.
func TestVforkStartsCleanProcesses(t *testing.T) { eachWay(t, testCleanProcesses) }

func testCleanProcesses(t *testing.T, a *agent) {
	if !a.spawner.vfork {
		t.Skip("execs start with syscall.ForkExec here")
	}
	cred := credential{uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), self: true}
	want := map[string]string{"SigBlk": "0000000000000000", "SigCgt": "0000000000000000"}
	if os.Getuid() == 0 {
		cred = credential{uid: 1000, gid: 1001, groups: []uint32{2000, 2001}}
		want["Uid"], want["Gid"], want["Groups"] = "1000\t1000\t1000\t1000", "1001\t1001\t1001\t1001", "2000 2001"
	}
	self, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(self), "\n") {
		if k, v, _ := strings.Cut(line, ":"); k == "SigIgn" {
			want["SigIgn"] = strings.TrimSpace(v)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan syscall.WaitStatus, 1)
	_, err = a.start(spawnSpec{path: "/bin/cat", argv: []string{"cat", "/proc/self/status"}, dir: "/", cred: cred, files: [3]uintptr{0, w.Fd(), 2}}, func(ws syscall.WaitStatus) { done <- ws })
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	<-done
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}

	_, err = a.start(spawnSpec{path: "/bin/cat", argv: []string{"cat"}, dir: "/no/such/dir", cred: cred, files: [3]uintptr{0, 1, 2}}, func(ws syscall.WaitStatus) { done <- ws })
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("chdir to a missing directory: want ENOENT, got %v", err)
	}
	if ws := <-done; ws.ExitStatus() != 127 {
		t.Fatalf("the child that could not chdir: exit %v, want 127", ws)
	}
}
