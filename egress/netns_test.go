package main

// The integration test: real packets through the real kernel, in network namespaces made here
// (never the host's own: a table there would drop the traffic of every box on the machine).
//
//	box1 (10.99.0.2, fd5b:0::2) ─┐      router: bridges sbx-boxes0 (10.99.0.1), sbx-boxes1
//	box2 (10.99.1.2, fd5b:1::2) ─┴─ router ─── server (198.18.0.1-.9, 2001:db8:5b::1,
//	                                            169.254.169.254: TCP echo :80 :8000,
//	pod  (10.99.2.2, own table) ──┘      UDP echo :7, DNS on 198.18.0.53:53 for *.test)
//
// sbx-egress node runs in the router netns, sbx-egress pod in the pod netns, both as the binary
// this test builds.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// inNetns runs fn on a thread switched into the named netns: sockets fn creates live there.
func inNetns(t testing.TB, name string, fn func()) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if _, _, e := syscall.RawSyscall(sysSetns(), target.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		runtime.UnlockOSThread()
		t.Fatalf("setns %s: %v", name, e)
	}
	defer func() {
		// A thread that cannot go back stays locked: Go then ends it with the goroutine.
		if _, _, e := syscall.RawSyscall(sysSetns(), orig.Fd(), syscall.CLONE_NEWNET, 0); e == 0 {
			runtime.UnlockOSThread()
		}
	}()
	fn()
}

// sysSetns: setns(2) is not in package syscall's tables.
func sysSetns() uintptr {
	if runtime.GOARCH == "arm64" {
		return 268
	}
	return 308
}

func sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

type lab struct {
	t                       testing.TB
	router, box1, box2, pod string
	server                  string
	bin, dir                string
	mu                      sync.Mutex
	queries                 []string // names the test DNS server was asked
	helper                  *exec.Cmd
}

func requireNetns(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nft)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

func newLab(t testing.TB) *lab {
	requireNetns(t)
	p := fmt.Sprintf("egt%d", os.Getpid()%100000)
	l := &lab{t: t, router: p + "-rt", box1: p + "-b1", box2: p + "-b2", pod: p + "-pod", server: p + "-srv", dir: t.TempDir()}
	for _, ns := range []string{l.router, l.box1, l.box2, l.pod, l.server} {
		exec.Command("ip", "netns", "del", ns).Run()
		sh(t, "ip", "netns", "add", ns)
		ns := ns
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	r := l.router
	sh(t, "ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	sh(t, "ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	for i, b := range []string{l.box1, l.box2} {
		br := fmt.Sprintf("sbx-boxes%d", i)
		sh(t, "ip", "-n", r, "link", "add", br, "type", "bridge")
		sh(t, "ip", "-n", r, "addr", "add", fmt.Sprintf("10.99.%d.1/24", i), "dev", br)
		sh(t, "ip", "-n", r, "link", "set", br, "up")
		sh(t, "ip", "-n", r, "link", "add", fmt.Sprintf("vb%d", i), "type", "veth", "peer", "name", "eth0", "netns", b)
		sh(t, "ip", "-n", r, "link", "set", fmt.Sprintf("vb%d", i), "master", br, "up")
		sh(t, "ip", "-n", b, "addr", "add", fmt.Sprintf("10.99.%d.2/24", i), "dev", "eth0")
		sh(t, "ip", "-n", b, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", b, "route", "add", "default", "via", fmt.Sprintf("10.99.%d.1", i))
		sh(t, "ip", "-n", r, "-6", "addr", "add", fmt.Sprintf("fd5b:%d::1/64", i), "dev", br, "nodad")
		sh(t, "ip", "-n", b, "-6", "addr", "add", fmt.Sprintf("fd5b:%d::2/64", i), "dev", "eth0", "nodad")
		sh(t, "ip", "-n", b, "-6", "route", "add", "default", "via", fmt.Sprintf("fd5b:%d::1", i))
	}
	sh(t, "ip", "-n", r, "link", "add", "vp", "type", "veth", "peer", "name", "eth0", "netns", l.pod)
	sh(t, "ip", "-n", r, "addr", "add", "10.99.2.1/24", "dev", "vp")
	sh(t, "ip", "-n", r, "link", "set", "vp", "up")
	sh(t, "ip", "-n", l.pod, "addr", "add", "10.99.2.2/24", "dev", "eth0")
	sh(t, "ip", "-n", l.pod, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", l.pod, "route", "add", "default", "via", "10.99.2.1")
	sh(t, "ip", "-n", r, "link", "add", "vs", "type", "veth", "peer", "name", "eth0", "netns", l.server)
	sh(t, "ip", "-n", r, "addr", "add", "198.18.0.254/24", "dev", "vs")
	sh(t, "ip", "-n", r, "link", "set", "vs", "up")
	sh(t, "ip", "-n", r, "route", "add", "169.254.169.254/32", "dev", "vs")
	for _, a := range []string{"198.18.0.1/24", "198.18.0.2/24", "198.18.0.3/24", "198.18.0.4/24", "198.18.0.5/24", "198.18.0.6/24", "198.18.0.9/24", "198.18.0.53/24", "169.254.169.254/32"} {
		sh(t, "ip", "-n", l.server, "addr", "add", a, "dev", "eth0")
	}
	sh(t, "ip", "-n", r, "-6", "addr", "add", "2001:db8:5b::fe/64", "dev", "vs", "nodad")
	sh(t, "ip", "-n", l.server, "-6", "addr", "add", "2001:db8:5b::1/64", "dev", "eth0", "nodad")
	sh(t, "ip", "-n", l.server, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", l.server, "-6", "route", "add", "default", "via", "2001:db8:5b::fe")
	sh(t, "ip", "-n", l.server, "route", "add", "default", "via", "198.18.0.254")
	l.startServers()

	l.bin = filepath.Join(l.dir, "sbx-egress")
	build := exec.Command("go", "build", "-o", l.bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	os.WriteFile(filepath.Join(l.dir, "resolv.conf"), []byte("nameserver 198.18.0.53\n"), 0o600)
	return l
}

// startServers: in the server netns, TCP echo on :80 and :8000 (every address), UDP echo on :7,
// and a DNS server for the zone *.test on 198.18.0.53:53 (UDP and TCP) that logs each name.
func (l *lab) startServers() {
	echoListen(l.t, l.server, ":80")
	echoListen(l.t, l.server, ":8000")
	inNetns(l.t, l.server, func() {
		uc, err := net.ListenPacket("udp", ":7")
		if err != nil {
			l.t.Fatal(err)
		}
		l.t.Cleanup(func() { uc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, a, err := uc.ReadFrom(buf)
				if err != nil {
					return
				}
				uc.WriteTo(buf[:n], a)
			}
		}()
		du, err := net.ListenPacket("udp", "198.18.0.53:53")
		if err != nil {
			l.t.Fatal(err)
		}
		l.t.Cleanup(func() { du.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, a, err := du.ReadFrom(buf)
				if err != nil {
					return
				}
				if resp := l.zone(buf[:n], false); resp != nil {
					du.WriteTo(resp, a)
				}
			}
		}()
		dt, err := net.Listen("tcp", "198.18.0.53:53")
		if err != nil {
			l.t.Fatal(err)
		}
		l.t.Cleanup(func() { dt.Close() })
		go func() {
			for {
				c, err := dt.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					q, err := readTCPMessage(c)
					if err == nil {
						if resp := l.zone(q, true); resp != nil {
							writeTCPMessage(c, resp)
						}
					}
				}()
			}
		}()
	})
}

// zone answers: ok.test A .3 (TTL 1: clamped to 30 s), alias.test CNAME ok2.test A .4, any
// name under wild.test A .5, bad.test A .6, ssh.test A .1, evil.test CNAME bad.test, big.test
// truncated over UDP and A .2 over TCP, hN.example.test A 198.18.2.N; others NXDOMAIN.
func (l *lab) zone(q []byte, tcp bool) []byte {
	var m dnsmessage.Message
	if m.Unpack(q) != nil || len(m.Questions) != 1 {
		return nil
	}
	qq := m.Questions[0]
	name := normalizeName(qq.Name.String())
	l.mu.Lock()
	l.queries = append(l.queries, name)
	l.mu.Unlock()
	m.Response, m.RecursionAvailable = true, true
	a := func(n string, ip byte) dnsmessage.Resource {
		return dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(n + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
			Body: &dnsmessage.AResource{A: [4]byte{198, 18, 0, ip}}}
	}
	if qq.Type == dnsmessage.TypeA {
		switch {
		case name == "ok.test":
			m.Answers = append(m.Answers, a(name, 3))
		case name == "alias.test":
			m.Answers = append(m.Answers, dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("alias.test."), Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: 60},
				Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("ok2.test.")}}, a("ok2.test", 4))
		case strings.HasSuffix(name, ".example.test"):
			var n int
			fmt.Sscanf(name, "h%d.", &n)
			r := a(name, 0)
			r.Body = &dnsmessage.AResource{A: [4]byte{198, 18, 2, byte(n)}}
			m.Answers = append(m.Answers, r)
		case strings.HasSuffix(name, ".wild.test"):
			m.Answers = append(m.Answers, a(name, 5))
		case name == "bad.test":
			m.Answers = append(m.Answers, a(name, 6))
		case name == "ssh.test":
			m.Answers = append(m.Answers, a(name, 1))
		case name == "evil.test":
			m.Answers = append(m.Answers, dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("evil.test."), Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: 60},
				Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("bad.test.")}}, a("bad.test", 6))
		case name == "big.test" && !tcp:
			m.Truncated = true
		case name == "big.test":
			m.Answers = append(m.Answers, a(name, 2))
		default:
			m.RCode = dnsmessage.RCodeNameError
		}
	}
	out, _ := m.Pack()
	return out
}

// echoListen listens on a TCP address in a netns and echoes what each connection sends.
func echoListen(t testing.TB, ns, addr string) net.Listener {
	var ln net.Listener
	inNetns(t, ns, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln
}

func (l *lab) asked(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.queries {
		if q == name {
			return true
		}
	}
	return false
}

func (l *lab) startHelper(mode string, env ...string) {
	l.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.router, l.bin, mode)
	if mode == "pod" {
		cmd = exec.Command("ip", "netns", "exec", l.pod, l.bin, mode)
	}
	cmd.Env = append(os.Environ(), append([]string{"SBX_EGRESS_DIR=" + l.dir, "SBX_EGRESS_RESOLV_CONF=" + filepath.Join(l.dir, "resolv.conf")}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	l.helper = cmd
	l.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if l.t.Failed() {
			l.t.Logf("helper output:\n%s", out.String())
		}
	})
	// Ready = the API answers (it listens only after the table is installed).
	for delay := 5 * time.Millisecond; ; delay *= 2 {
		if st, _, err := l.api("GET", "/v1/health", ""); err == nil && st == 200 {
			return
		}
		select {
		case <-done:
			l.t.Fatalf("helper exited: %s", out.String())
		case <-time.After(delay):
		}
	}
}

func (l *lab) stopHelper() {
	l.helper.Process.Signal(syscall.SIGTERM)
	l.helper.Process.Wait()
}

func (l *lab) api(method, path, body string) (int, string, error) {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(l.dir, "egress.sock"))
	}}}
	req, _ := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (l *lab) put(id string, addrs []string, spec string) {
	l.t.Helper()
	ab, _ := json.Marshal(addrs)
	st, body, err := l.api("PUT", "/v1/boxes/"+id, fmt.Sprintf(`{"addresses":%s,"spec":%s,"dns":["198.18.0.53:53"]}`, ab, spec))
	if err != nil || st != 200 {
		l.t.Fatalf("PUT %s: %d %s %v", id, st, body, err)
	}
}

// dial connects from a netns; the returned error tells reset/refused from dropped (timeout).
func dial(t testing.TB, ns, network, addr string) (net.Conn, error) {
	return dialTimeout(t, ns, network, addr, 5*time.Second)
}

func dialTimeout(t testing.TB, ns, network, addr string, d time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	inNetns(t, ns, func() { c, err = net.DialTimeout(network, addr, d) })
	return c, err
}

// wantDropped: the connection attempt gets no answer at all (a dropped SYN); one second of
// silence stands for "never", as a refused or accepted connection answers in microseconds here.
func wantDropped(t testing.TB, ns, addr string) {
	t.Helper()
	c, err := dialTimeout(t, ns, "tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	if !isTimeout(err) {
		t.Fatalf("%s → %s: want dropped, got %v", ns, addr, err)
	}
}

// tcpOK: a connection opens and echoes.
func tcpOK(t testing.TB, ns, addr string) error {
	c, err := dial(t, ns, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		return fmt.Errorf("echo: %q %v", line, err)
	}
	return nil
}

// ping sends one ICMP echo request from a netns and returns the type of the first ICMP message
// that comes back from dst's direction (0 echo reply, 3 unreachable), or -1 after 5 s.
func ping(t testing.TB, ns, dst string) int {
	var c net.PacketConn
	inNetns(t, ns, func() {
		var err error
		if c, err = net.ListenPacket("ip4:icmp", "0.0.0.0"); err != nil {
			t.Fatal(err)
		}
	})
	defer c.Close()
	msg := []byte{8, 0, 0, 0, 0x5b, 0x5b, 0, 1, 'p', 'i', 'n', 'g'}
	var sum uint32
	for i := 0; i < len(msg); i += 2 {
		sum += uint32(msg[i])<<8 | uint32(msg[i+1])
	}
	sum = (sum >> 16) + (sum & 0xffff)
	sum += sum >> 16
	msg[2], msg[3] = byte(^sum>>8), byte(^sum)
	if _, err := c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return -1
		}
		if n > 0 && buf[0] != 8 { // not our own request
			return int(buf[0])
		}
	}
}

// echoOnce writes a line on an open connection and reads it back.
func echoOnce(c net.Conn, line string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(line)); err != nil {
		return err
	}
	got := make([]byte, len(line))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != line {
		return fmt.Errorf("echo %q", got)
	}
	return nil
}

func udpOK(t testing.TB, ns, addr string) error {
	c, err := dial(t, ns, "udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "ping" {
		return fmt.Errorf("udp echo: %q %v", buf[:n], err)
	}
	return nil
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ECONNRESET)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func wantRefused(t testing.TB, ns, addr string) {
	t.Helper()
	if err := tcpOK(t, ns, addr); !isRefused(err) {
		t.Fatalf("%s → %s: want refused, got %v", ns, addr, err)
	}
}

func wantOK(t testing.TB, ns, addr string) {
	t.Helper()
	if err := tcpOK(t, ns, addr); err != nil {
		t.Fatalf("%s → %s: %v", ns, addr, err)
	}
}

// query asks server (any address: box DNS is redirected) from a netns.
func query(t testing.TB, ns, server, name string, tcp bool) (dnsmessage.RCode, []string) {
	t.Helper()
	q, _ := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}).Pack()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	c, err := dial(t, ns, network, server)
	if err != nil {
		t.Fatalf("dns %s: %v", name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var resp []byte
	if tcp {
		if err = writeTCPMessage(c, q); err == nil {
			resp, err = readTCPMessage(c)
		}
	} else if _, err = c.Write(q); err == nil {
		buf := make([]byte, 4096)
		var n int
		n, err = c.Read(buf)
		resp = buf[:n]
	}
	if err != nil {
		t.Fatalf("dns %s via %s: %v", name, server, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil || m.ID != 4242 {
		t.Fatalf("dns %s: bad answer %v", name, err)
	}
	var addrs []string
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(r.A).String())
		}
	}
	return m.RCode, addrs
}

const allowlistSpec = `{"mode":"allowlist","allow":[
	{"host":"198.18.0.1/32","ports":[80,80],"protocol":"tcp"},
	{"host":"ok.test"},{"host":"alias.test"},{"host":"*.wild.test","ports":[80,80],"protocol":"tcp"},
	{"host":"ssh.test"},{"host":"bad.test"},{"host":"evil.test"},{"host":"big.test"}],
	"deny":[{"host":"bad.test"},{"host":"ssh.test","ports":[8000,8000],"protocol":"tcp"}],
	"endpoints":[{"host":"198.18.0.9/32","ports":[8000,8000],"protocol":"tcp"}]}`

func TestNodeInNetns(t *testing.T) {
	l := newLab(t)
	l.startHelper("node", "SBX_EGRESS_ALWAYS_DENY=198.18.0.9/32")

	// Fail closed: a box nobody registered sends nothing (dropped: TCP retries once registered).
	wantDropped(t, l.box1, "198.18.0.1:80")
	// The proxy's port takes only redirected box DNS: asked directly, from an unregistered box or
	// from another network, it does not answer at all.
	wantDropped(t, l.box2, "10.99.1.1:15353")
	wantDropped(t, l.server, "198.18.0.254:15353")

	l.put("box1", []string{"10.99.0.2"}, allowlistSpec)
	wantOK(t, l.box1, "198.18.0.1:80")
	wantRefused(t, l.box1, "198.18.0.1:8000") // port not allowed
	wantRefused(t, l.box1, "198.18.0.2:80")   // address not allowed
	wantRefused(t, l.box1, "198.18.0.3:80")   // ok.test's address, before DNS named it
	wantOK(t, l.box1, "198.18.0.9:8000")      // an endpoint beats the always-denied
	wantRefused(t, l.box1, "198.18.0.9:80")
	wantRefused(t, l.box1, "169.254.169.254:80")
	if err := udpOK(t, l.box1, "198.18.0.1:7"); err == nil {
		t.Fatal("UDP to a TCP-only allow went through")
	}

	// DNS: an allowed name is forwarded and its address opened before the answer arrives.
	if rc, addrs := query(t, l.box1, "198.18.0.53:53", "OK.test", false); rc != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0] != "198.18.0.3" {
		t.Fatalf("ok.test: %v %v", rc, addrs)
	}
	wantOK(t, l.box1, "198.18.0.3:80")
	wantOK(t, l.box1, "198.18.0.3:8000")
	// Queries to any other resolver address land in the proxy too.
	if rc, addrs := query(t, l.box1, "198.18.0.2:53", "alias.test", true); rc != dnsmessage.RCodeSuccess || len(addrs) != 1 {
		t.Fatalf("alias.test over TCP via another address: %v %v", rc, addrs)
	}
	wantOK(t, l.box1, "198.18.0.4:80") // learned through the CNAME
	// Names no rule allows, and names denied without ports: NXDOMAIN, never forwarded.
	for _, n := range []string{"nope.test", "bad.test", "wild.test"} {
		if rc, _ := query(t, l.box1, "198.18.0.53:53", n, false); rc != dnsmessage.RCodeNameError {
			t.Fatalf("%s: %v", n, rc)
		}
		if l.asked(n) {
			t.Fatalf("%s was forwarded", n)
		}
	}
	wantRefused(t, l.box1, "198.18.0.6:80")
	// A CNAME into a denied name: NXDOMAIN too.
	if rc, _ := query(t, l.box1, "198.18.0.53:53", "evil.test", false); rc != dnsmessage.RCodeNameError {
		t.Fatalf("evil.test: %v", rc)
	}
	// Truncated over UDP: the client gets the truncated answer (and would retry over TCP); the
	// proxy fetched the whole answer over TCP and opened its address already.
	wantRefused(t, l.box1, "198.18.0.2:80")
	if rc, addrs := query(t, l.box1, "198.18.0.53:53", "big.test", false); rc != dnsmessage.RCodeSuccess || len(addrs) != 0 {
		t.Fatalf("big.test: %v %v", rc, addrs)
	}
	wantOK(t, l.box1, "198.18.0.2:80")
	// ICMP follows address rules without ports (ok.test's learned address), not port-scoped ones.
	if typ := ping(t, l.box1, "198.18.0.3"); typ != 0 {
		t.Fatalf("ping ok.test's address: ICMP type %d", typ)
	}
	if typ := ping(t, l.box1, "198.18.0.1"); typ != 3 {
		t.Fatalf("ping a TCP-only address: ICMP type %d, want 3 (unreachable)", typ)
	}
	// Wildcard with a port.
	if rc, _ := query(t, l.box1, "198.18.0.53:53", "a.b.wild.test", false); rc != dnsmessage.RCodeSuccess {
		t.Fatal(rc)
	}
	wantOK(t, l.box1, "198.18.0.5:80")
	wantRefused(t, l.box1, "198.18.0.5:8000")
	// A name denied with a port: its addresses are refused on that port only, whatever else allows.
	if rc, _ := query(t, l.box1, "198.18.0.53:53", "ssh.test", false); rc != dnsmessage.RCodeSuccess {
		t.Fatal(rc)
	}
	wantRefused(t, l.box1, "198.18.0.1:8000")
	wantOK(t, l.box1, "198.18.0.1:80")

	// A change keeps what DNS taught for names the new policy still allows (their open
	// connections survive) and cuts the rest.
	keep, err := dial(t, l.box1, "tcp", "198.18.0.3:80") // ok.test
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	cut, err := dial(t, l.box1, "tcp", "198.18.0.4:80") // alias.test
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	l.put("box1", []string{"10.99.0.2"}, strings.Replace(allowlistSpec, `{"host":"alias.test"},`, `{"host":"other.test"},`, 1))
	if err := echoOnce(keep, "still\n"); err != nil {
		t.Fatalf("connection to a still-allowed name cut: %v", err)
	}
	if err := echoOnce(cut, "gone\n"); err == nil || isTimeout(err) {
		t.Fatalf("connection to a name no longer allowed survived: %v", err)
	}
	wantOK(t, l.box1, "198.18.0.3:80")
	wantRefused(t, l.box1, "198.18.0.4:80")

	// Denylist: everything but the denied and the always-denied; other boxes refused.
	l.put("box2", []string{"10.99.1.2"}, `{"mode":"all","allow":[],"deny":[],"endpoints":[]}`)
	echoListen(t, l.box2, ":9000")
	l.put("box1", []string{"10.99.0.2"}, `{"mode":"denylist","allow":[],"deny":[{"host":"198.18.0.2/32"},{"host":"198.18.0.1/32","ports":[8000,8000],"protocol":"tcp"}],"endpoints":[]}`)
	wantOK(t, l.box1, "198.18.0.1:80")
	wantOK(t, l.box1, "198.18.0.3:8000")
	wantRefused(t, l.box1, "198.18.0.1:8000")
	wantRefused(t, l.box1, "198.18.0.2:80")
	wantRefused(t, l.box1, "198.18.0.9:80")
	wantRefused(t, l.box1, "169.254.169.254:80")
	wantRefused(t, l.box1, "10.99.1.2:9000")
	if err := udpOK(t, l.box1, "198.18.0.1:7"); err != nil {
		t.Fatal(err)
	}
	wantOK(t, l.box2, "198.18.0.2:80")
	// Denylist without domains: DNS is not redirected (the proxy never sees it).
	if rc, _ := query(t, l.box1, "198.18.0.53:53", "nope.test", false); rc != dnsmessage.RCodeNameError || !l.asked("nope.test") {
		t.Fatal("denylist DNS was not passed through")
	}

	// A change cuts connections already open: the next packet of an open stream is refused.
	c, err := dial(t, l.box1, "tcp", "198.18.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.Write([]byte("one\n"))
	if line, err := r.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatal(line, err)
	}
	l.put("box1", []string{"10.99.0.2"}, `{"mode":"denylist","allow":[],"deny":[{"host":"198.18.0.1/32"}],"endpoints":[]}`)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("two\n"))
	if line, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("open connection survived the change: %q %v", line, err)
	}

	// State survives a restart; the table is rebuilt from state.json.
	l.put("box1", []string{"10.99.0.2"}, allowlistSpec)
	l.stopHelper()
	wantOK(t, l.box1, "198.18.0.1:80") // the table stays while the helper is away
	l.startHelper("node", "SBX_EGRESS_ALWAYS_DENY=198.18.0.9/32")
	wantOK(t, l.box1, "198.18.0.1:80")
	wantRefused(t, l.box1, "198.18.0.2:80")
	st, body, _ := l.api("GET", "/v1/boxes", "")
	if st != 200 || !strings.Contains(body, `"box1"`) || !strings.Contains(body, `"box2"`) {
		t.Fatalf("GET /v1/boxes after restart: %d %s", st, body)
	}

	// The address moves to another id; box1 keeps no address.
	l.put("box3", []string{"10.99.0.2"}, `{"mode":"none","allow":[],"deny":[],"endpoints":[]}`)
	wantRefused(t, l.box1, "198.18.0.1:80")
	if rc, _ := query(t, l.box1, "198.18.0.53:53", "ok.test", false); rc != dnsmessage.RCodeNameError {
		t.Fatalf("none: %v", rc)
	}
	// Unregistered again: dropped.
	if st, _, _ := l.api("DELETE", "/v1/boxes/box3", ""); st != 204 {
		t.Fatal(st)
	}
	wantDropped(t, l.box1, "198.18.0.1:80")
	// Bad input never reaches nft.
	st, body, _ = l.api("PUT", "/v1/boxes/x", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[{"host":"1.2.3.4/32 }; flush ruleset; {"}],"deny":[],"endpoints":[]}}`)
	if st != 400 || !strings.Contains(body, "error") {
		t.Fatalf("injection: %d %s", st, body)
	}
	out, err := exec.Command("ip", "netns", "exec", l.router, "nft", "list", "table", "inet", "sbx_egress").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "chain egress") {
		t.Fatalf("table gone: %v %s", err, out)
	}

	// Nested blocks with ports become address ranges in the kernel's interval set: every address
	// gets the ports of the blocks around it.
	l.put("box1", []string{"10.99.0.2"}, `{"mode":"allowlist","allow":[
		{"host":"198.18.0.0/24","ports":[80,80],"protocol":"tcp"},{"host":"198.18.0.3/32","ports":[8000,8000],"protocol":"tcp"},
		{"host":"198.18.0.4/30","ports":[79,81],"protocol":"tcp"}],"deny":[],"endpoints":[]}`)
	wantOK(t, l.box1, "198.18.0.3:8000")
	wantOK(t, l.box1, "198.18.0.3:80")
	wantOK(t, l.box1, "198.18.0.2:80")
	wantOK(t, l.box1, "198.18.0.5:80")
	wantRefused(t, l.box1, "198.18.0.2:8000")
	wantRefused(t, l.box1, "198.18.0.5:8000")
}

func TestPodInNetns(t *testing.T) {
	l := newLab(t)
	l.startHelper("pod", `SBX_EGRESS_SPEC={"spec":`+allowlistSpec+`,"dns":["198.18.0.53:53"]}`, "SBX_EGRESS_HOST_ADDRESSES=198.18.0.2")
	ready := exec.Command(l.bin, "ready")
	ready.Env = append(os.Environ(), "SBX_EGRESS_DIR="+l.dir)
	if err := ready.Run(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	wantOK(t, l.pod, "198.18.0.1:80")
	wantRefused(t, l.pod, "198.18.0.1:8000")
	wantRefused(t, l.pod, "198.18.0.3:80")
	if rc, addrs := query(t, l.pod, "198.18.0.53:53", "ok.test", false); rc != dnsmessage.RCodeSuccess || len(addrs) != 1 {
		t.Fatalf("ok.test: %v %v", rc, addrs)
	}
	wantOK(t, l.pod, "198.18.0.3:80")
	if rc, _ := query(t, l.pod, "198.18.0.53:53", "nope.test", true); rc != dnsmessage.RCodeNameError || l.asked("nope.test") {
		t.Fatalf("nope.test: %v", rc)
	}
	// Inbound keeps working (replies pass), loopback too.
	echoListen(t, l.pod, ":9000")
	wantOK(t, l.box2, "10.99.2.2:9000")
	wantOK(t, l.pod, "127.0.0.1:9000")
	// The same API with `sbx-egress call` (id self).
	call := exec.Command(l.bin, "call", "PUT", "/v1/boxes/self")
	call.Env = append(os.Environ(), "SBX_EGRESS_DIR="+l.dir)
	call.Stdin = strings.NewReader(`{"spec":{"mode":"denylist","allow":[],"deny":[{"host":"198.18.0.1/32"}],"endpoints":[]}}`)
	if out, err := call.CombinedOutput(); err != nil || string(out) != "{}\n" {
		t.Fatalf("call: %v %s", err, out)
	}
	wantRefused(t, l.pod, "198.18.0.1:80")
	wantOK(t, l.pod, "198.18.0.5:8000")
	wantRefused(t, l.pod, "198.18.0.2:80") // SBX_EGRESS_HOST_ADDRESSES
	// The pod's default gateway (the node on the CNI bridge) is always denied too.
	echoListen(t, l.router, "10.99.2.1:9001")
	wantRefused(t, l.pod, "10.99.2.1:9001")
	wantOK(t, l.box2, "10.99.2.1:9001") // it listens
	bad := exec.Command(l.bin, "call", "PUT", "/v1/boxes/self")
	bad.Env = call.Env
	bad.Stdin = strings.NewReader(`{"spec":{"mode":"bogus"}}`)
	var stderr bytes.Buffer
	bad.Stderr = &stderr
	if err := bad.Run(); err == nil || !strings.HasPrefix(stderr.String(), "400: ") {
		t.Fatalf("bad call: %v %s", err, stderr.String())
	}
}

// udpSink records the payloads that reach a UDP port of the server.
func udpSink(t testing.TB, ns, addr string) chan string {
	got := make(chan string, 16)
	var c net.PacketConn
	inNetns(t, ns, func() {
		var err error
		if c, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 100)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

// sendFrom sends one UDP datagram from a netns; from, if set, is a source address the sender does
// not own, bound with IPV6_FREEBIND: what any process can do without a capability.
func sendFrom(t testing.TB, ns, from, to, payload string) error {
	var err error
	inNetns(t, ns, func() {
		fd, e := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM, 0)
		if e != nil {
			err = e
			return
		}
		defer syscall.Close(fd)
		if from != "" {
			syscall.SetsockoptInt(fd, syscall.SOL_IPV6, 78 /* IPV6_FREEBIND */, 1)
			if err = syscall.Bind(fd, &syscall.SockaddrInet6{Addr: netip.MustParseAddr(from).As16()}); err != nil {
				return
			}
		}
		ap := netip.MustParseAddrPort(to)
		err = syscall.Sendto(fd, []byte(payload), 0, &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	})
	return err
}

func macOf(t testing.TB, ns string) string {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/address").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// IPv6: filtering and DNS redirect work, and a box's process can send from another box's address
// without any capability; with the boxes' MACs registered, such a packet is dropped instead of
// passing under the other's policy.
func TestIPv6SpoofInNetns(t *testing.T) {
	l := newLab(t)
	l.startHelper("node")
	// One socket, so what arrives arrives in the order sent (one path: box2's bridge).
	sink := udpSink(t, l.server, "[2001:db8:5b::1]:7001")
	box1 := func(macs string) string {
		return fmt.Sprintf(`{"addresses":["10.99.0.2","fd5b:0::2"],"macs":[%s],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`, macs)
	}
	box2 := fmt.Sprintf(`{"addresses":["10.99.1.2","fd5b:1::2"],"macs":["%s"],"spec":{"mode":"allowlist","allow":[{"host":"2001:db8:5b::1/128","ports":[7001,7001],"protocol":"udp"}],"deny":[],"endpoints":[]}}`, macOf(t, l.box2))
	for id, body := range map[string]string{"box1": box1(""), "box2": box2} {
		if st, b, err := l.api("PUT", "/v1/boxes/"+id, body); st != 200 {
			t.Fatal(st, b, err)
		}
	}
	wantOK(t, l.box1, "[2001:db8:5b::1]:80")
	wantRefused(t, l.box2, "[2001:db8:5b::1]:80")
	// IPv6 DNS of a filtered box lands in the proxy too (box2 is an allowlist).
	for _, tcp := range []bool{false, true} {
		if rc, _ := query(t, l.box2, "[2001:db8:5b::1]:53", "ok.test", tcp); rc != dnsmessage.RCodeNameError {
			t.Fatalf("ok.test over IPv6 (tcp %v): %v", tcp, rc)
		}
	}
	// Without box1's MAC the spoof works: box2 sends under box1's policy ("all").
	if err := sendFrom(t, l.box2, "fd5b:0::2", "[2001:db8:5b::1]:7001", "spoof1"); err != nil {
		t.Fatal(err)
	}
	if got := <-sink; got != "spoof1" {
		t.Fatal(got)
	}
	if st, b, err := l.api("PUT", "/v1/boxes/box1", box1(`"`+macOf(t, l.box1)+`"`)); st != 200 {
		t.Fatal(st, b, err)
	}
	wantOK(t, l.box1, "[2001:db8:5b::1]:80")
	wantOK(t, l.box1, "198.18.0.1:80")
	sendFrom(t, l.box2, "fd5b:0::2", "[2001:db8:5b::1]:7001", "spoof2")
	if err := sendFrom(t, l.box2, "", "[2001:db8:5b::1]:7001", "marker"); err != nil {
		t.Fatal(err)
	}
	if got := <-sink; got != "marker" {
		t.Fatalf("spoofed packet arrived: %q", got)
	}
	// A wrong MAC: the box's own traffic is dropped.
	if st, b, err := l.api("PUT", "/v1/boxes/box1", box1(`"02:00:00:00:00:01"`)); st != 200 {
		t.Fatal(st, b, err)
	}
	wantDropped(t, l.box1, "198.18.0.1:80")
}

// TestMeasure prints the numbers of the report (SBX_EGRESS_MEASURE=1): PUT→committed latency of
// a 100-entry spec and the DNS proxy's added latency per query.
func TestMeasure(t *testing.T) {
	if os.Getenv("SBX_EGRESS_MEASURE") == "" {
		t.Skip("set SBX_EGRESS_MEASURE=1")
	}
	l := newLab(t)
	l.startHelper("node")
	var allow []string
	for i := 0; i < 50; i++ {
		allow = append(allow, fmt.Sprintf(`{"host":"198.%d.%d.0/24","ports":[443,443],"protocol":"tcp"}`, 19+i/200, i), fmt.Sprintf(`{"host":"h%d.example.test"}`, i))
	}
	spec := `{"mode":"allowlist","allow":[` + strings.Join(allow, ",") + `],"deny":[],"endpoints":[]}`
	l.put("box2", []string{"10.99.1.2"}, `{"mode":"all","allow":[],"deny":[],"endpoints":[]}`)
	var d []time.Duration
	for i := 0; i < 100; i++ {
		s := spec
		if i%2 == 1 {
			s = strings.Replace(spec, "[443,443]", "[444,444]", 1) // a changed spec: sets rebuilt every time
		}
		start := time.Now()
		l.put("box1", []string{"10.99.0.2"}, s)
		d = append(d, time.Since(start))
	}
	t.Logf("PUT 100-entry spec → committed: p50 %v p90 %v", pct(d, 50), pct(d, 90))
	var direct, first, again, refused []time.Duration
	for i := 0; i < 100; i++ {
		start := time.Now()
		query(t, l.box2, "198.18.0.53:53", "ok.test", false) // mode all: not redirected
		direct = append(direct, time.Since(start))
		name := fmt.Sprintf("h%d.example.test", i%50)
		start = time.Now()
		if rc, addrs := query(t, l.box1, "198.18.0.53:53", name, false); rc != 0 || len(addrs) != 1 {
			t.Fatal(rc, addrs)
		}
		if i < 50 {
			first = append(first, time.Since(start))
		} else {
			again = append(again, time.Since(start))
		}
		start = time.Now()
		if rc, _ := query(t, l.box1, "198.18.0.53:53", "nope.test", false); rc != dnsmessage.RCodeNameError {
			t.Fatal(rc)
		}
		refused = append(refused, time.Since(start))
	}
	t.Logf("DNS query p50: direct %v; through the proxy: a new address (one nft run before the answer) %v, an address already learned %v, refused locally (NXDOMAIN) %v",
		pct(direct, 50), pct(first, 50), pct(again, 50), pct(refused, 50))
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*p/100]
}
