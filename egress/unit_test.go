package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func ports(lo, hi int) *[2]int { return &[2]int{lo, hi} }

func TestCompileSpecRejectsBadInput(t *testing.T) {
	bad := []Target{
		{Host: "1.2.3.4/32; flush ruleset"},
		{Host: "1.2.3.4/32 } ; flush ruleset ; {"},
		{Host: "a.test } ; flush ruleset"},
		{Host: "a.test\nflush ruleset"},
		{Host: "\"a.test\""},
		{Host: "a.test@b"},
		{Host: "a..test"},
		{Host: "-a.test"},
		{Host: "a-.test"},
		{Host: "a.*.test"},
		{Host: "*"},
		{Host: "*.*.test"},
		{Host: "ü.test"},
		{Host: strings.Repeat("a", 64) + ".test"},
		{Host: strings.Repeat("abcdefghi.", 26) + "test"},
		{Host: "198.18.0.1/24"},
		{Host: "198.18.0.0/33"},
		{Host: "1.2.3"},
		{Host: "999.1.1.1"},
		{Host: "::ffff:1.2.3.4"},
		{Host: "fe80::1%eth0"},
		{Host: "2001:db8::1/32"},
		{Host: ""},
		{Host: "a.test", Ports: ports(0, 80)},
		{Host: "a.test", Ports: ports(80, 65536)},
		{Host: "a.test", Ports: ports(90, 80)},
		{Host: "a.test", Protocol: "tcp"},
		{Host: "a.test", Ports: ports(80, 80), Protocol: "icmp"},
		{Host: "a.test", Ports: ports(80, 80), Protocol: "tcp; flush ruleset"},
	}
	for _, tg := range bad {
		_, err := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{tg}})
		if err == nil {
			t.Errorf("accepted %+v", tg)
		}
	}
	if _, err := compileSpec(&Spec{Mode: "allowlist; flush ruleset"}); err == nil {
		t.Error("accepted a bad mode")
	}
	if _, err := compileSpec(&Spec{Mode: "all", Endpoints: []Target{{Host: "a.test", Ports: ports(1, 1)}}}); err == nil {
		t.Error("accepted a domain endpoint")
	}
	if _, err := compileSpec(nil); err == nil {
		t.Error("accepted no spec")
	}
	many := make([]Target, maxTargets+1)
	for i := range many {
		many[i] = Target{Host: "a.test"}
	}
	if _, err := compileSpec(&Spec{Mode: "allowlist", Allow: many}); err == nil {
		t.Error("accepted too many targets")
	}
}

func TestCompileSpecAccepts(t *testing.T) {
	p, err := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{
		{Host: "198.18.0.0/15"}, {Host: "198.18.0.1"}, {Host: "2001:db8::/32", Ports: ports(443, 443), Protocol: "udp"},
		{Host: "Example.COM."}, {Host: "*.example.com", Ports: ports(1, 65535)}, {Host: "xn--bcher-kva.test"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.allow[1].prefix.String() != "198.18.0.1/32" || p.allow[3].domain != "example.com" || !p.allow[4].wildcard {
		t.Fatalf("compiled %+v", p.allow)
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "box-1", "a.b_c-D9", strings.Repeat("x", 128)} {
		if !validID(id) {
			t.Errorf("refused %q", id)
		}
	}
	for _, id := range []string{"", "a b", "a/b", "a;b", "a\n", strings.Repeat("x", 129), "ü"} {
		if validID(id) {
			t.Errorf("accepted %q", id)
		}
	}
}

func TestNameMatching(t *testing.T) {
	exact := rule{domain: "example.com"}
	wild := rule{domain: "example.com", wildcard: true}
	cases := []struct {
		r    rule
		name string
		want bool
	}{
		{exact, "example.com", true},
		{exact, normalizeName("EXAMPLE.com."), true},
		{exact, "a.example.com", false},
		{exact, "xexample.com", false},
		{wild, "a.example.com", true},
		{wild, normalizeName("A.B.Example.Com."), true},
		{wild, "example.com", false},
		{wild, "xexample.com", false},
		{wild, ".example.com", false},
		{rule{prefix: netip.MustParsePrefix("1.2.3.4/32")}, "1.2.3.4", false},
	}
	for _, c := range cases {
		if got := c.r.matches(c.name); got != c.want {
			t.Errorf("%+v matches %q = %v", c.r, c.name, got)
		}
	}
}

func TestDecide(t *testing.T) {
	allowlist, _ := compileSpec(&Spec{Mode: "allowlist",
		Allow: []Target{{Host: "ok.test"}, {Host: "*.ok.test", Ports: ports(443, 443), Protocol: "tcp"}},
		Deny:  []Target{{Host: "no.ok.test"}, {Host: "ssh.ok.test", Ports: ports(22, 22)}}})
	if v := decide(allowlist, "ok.test"); v.nxdomain || len(v.allow) != 1 || v.allow[0].hasPorts {
		t.Errorf("ok.test: %+v", v)
	}
	if v := decide(allowlist, "a.ok.test"); v.nxdomain || len(v.allow) != 1 || v.allow[0].lo != 443 {
		t.Errorf("a.ok.test: %+v", v)
	}
	if v := decide(allowlist, "no.ok.test"); !v.nxdomain {
		t.Errorf("denied name answered: %+v", v)
	}
	if v := decide(allowlist, "ssh.ok.test"); v.nxdomain {
		t.Errorf("port-scoped deny made NXDOMAIN: %+v", v)
	}
	if v := decide(allowlist, "other.test"); !v.nxdomain {
		t.Errorf("unlisted name answered: %+v", v)
	}
	none, _ := compileSpec(&Spec{Mode: "none"})
	if v := decide(none, "ok.test"); !v.nxdomain {
		t.Error("none answered a name")
	}
	deny, _ := compileSpec(&Spec{Mode: "denylist", Deny: []Target{{Host: "*.bad.test"}}})
	if v := decide(deny, "x.bad.test"); !v.nxdomain {
		t.Error("denylist answered a denied name")
	}
	if v := decide(deny, "fine.test"); v.nxdomain {
		t.Error("denylist refused a name")
	}
	if !denylistNeedsDNS(deny) || allPolicyNeedsDNS() {
		t.Error("needsDNS")
	}
	if cs := denyClasses(allowlist, []string{"x.test", "ssh.ok.test"}); len(cs) != 1 || cs[0].lo != 22 {
		t.Errorf("denyClasses %+v", cs)
	}
}

func denylistNeedsDNS(p *policy) bool { return p.needsDNS() }
func allPolicyNeedsDNS() bool {
	p, _ := compileSpec(&Spec{Mode: "all", Allow: []Target{{Host: "1.2.3.4"}}})
	return p.needsDNS()
}

// disjoint must give non-overlapping elements that cover exactly the same (address, proto, port)
// points as its input.
func TestDisjointProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	// Addresses near 10.0.0.0 and near the family's last address (the walk must stop there);
	// now and then a block of the whole family.
	randAddr := func() netip.Addr {
		if rng.Intn(2) == 0 {
			return netip.AddrFrom4([4]byte{255, 255, 255 - byte(rng.Intn(4)), byte(rng.Intn(256))})
		}
		return netip.AddrFrom4([4]byte{10, 0, byte(rng.Intn(4)), byte(rng.Intn(256))})
	}
	for iter := 0; iter < 600; iter++ {
		var in []portBlock
		for i := 0; i < 1+rng.Intn(12); i++ {
			bits := 20 + rng.Intn(13)
			if rng.Intn(10) == 0 {
				bits = 0
			}
			p := netip.PrefixFrom(randAddr(), bits).Masked()
			lo := 1 + rng.Intn(20)
			hi := lo + rng.Intn(10)
			proto := []string{"tcp", "udp"}[rng.Intn(2)]
			in = append(in, portBlock{p, proto, uint16(lo), uint16(hi)})
		}
		left := maxBoxElements
		out, ok := disjoint(in, &left)
		if !ok {
			t.Fatalf("budget spent on %v", in)
		}
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				a, b := out[i], out[j]
				if a.proto == b.proto && !a.to.Less(b.from) && !b.to.Less(a.from) && a.lo <= b.hi && b.lo <= a.hi {
					t.Fatalf("overlap %v and %v from %v", a, b, in)
				}
			}
		}
		covers := func(bs []portBlock, addr netip.Addr, proto string, port uint16) bool {
			for _, b := range bs {
				if b.proto == proto && b.prefix.Contains(addr) && b.lo <= port && port <= b.hi {
					return true
				}
			}
			return false
		}
		coversOut := func(bs []rangeBlock, addr netip.Addr, proto string, port uint16) bool {
			for _, b := range bs {
				if b.proto == proto && !addr.Less(b.from) && !b.to.Less(addr) && b.lo <= port && port <= b.hi {
					return true
				}
			}
			return false
		}
		for k := 0; k < 400; k++ {
			addr := randAddr()
			proto := []string{"tcp", "udp"}[rng.Intn(2)]
			port := uint16(1 + rng.Intn(32))
			if covers(in, addr, proto, port) != coversOut(out, addr, proto, port) {
				t.Fatalf("%s %s %d: in %v out %v", addr, proto, port, in, out)
			}
		}
	}
}

// Everything compileBox and baseTableText write consists of a small alphabet: no caller string
// survives into it (ids are hashed, hosts are re-printed from parsed values).
var safeNft = regexp.MustCompile(`^[a-z0-9_ .:,/{}@;=*"\-\n\t]*$`)

func TestRuleTextOrderAndAlphabet(t *testing.T) {
	cfg := newNftConfig(false, []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}, 15353)
	p, err := compileSpec(&Spec{Mode: "allowlist",
		Allow:     []Target{{Host: "10.1.0.0/16"}, {Host: "203.0.113.7"}, {Host: "0.0.0.0/0", Ports: ports(443, 443)}, {Host: "ok.test"}, {Host: "*.ok.test", Ports: ports(80, 80)}},
		Deny:      []Target{{Host: "198.18.0.7"}, {Host: "ssh.test", Ports: ports(22, 22), Protocol: "tcp"}},
		Endpoints: []Target{{Host: "10.99.0.1/32", Ports: ports(8080, 8080), Protocol: "tcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	tag := boxTag("box;flush ruleset")
	br, err := compileBox(cfg, tag, p)
	if err != nil {
		t.Fatal(err)
	}
	text := baseTableText(cfg) + "add chain " + table + " " + tag + "\n" + addBoxText(cfg, tag, br) +
		addrElems("add", tag, []netip.Addr{netip.MustParseAddr("10.99.0.2")}, true) + clearBoxText(cfg, tag, br) +
		learnText(br.learnAllow[0].name4, netip.MustParseAddr("198.18.0.3"), time.Minute)
	if !safeNft.MatchString(text) {
		t.Fatalf("unexpected characters in:\n%s", text)
	}
	if strings.Contains(text, "box;") || strings.Contains(text, "flush ruleset") {
		t.Fatal("id leaked into nft text")
	}
	// The check order of types.ts's EgressSpec.
	order := []string{"_ep_p4 accept", "_dn_a4 goto reject_box", "_ld4_0 meta l4proto tcp th dport 22 goto reject_box",
		"_an_a4 accept", "@never4 goto reject_box", `oifname "sbx-boxes*" goto reject_box`, "_ap_a4 accept", "@private4 goto reject_box",
		"_al_p4 accept", "_la4_0 accept", "_la4_1 meta l4proto { tcp, udp } th dport 80 accept"}
	rules := strings.Join(br.rules, "\n")
	last := -1
	for _, o := range order {
		i := strings.Index(rules, o)
		if i <= last {
			t.Fatalf("%q out of order in:\n%s", o, rules)
		}
		last = i
	}
	if br.rules[len(br.rules)-1] != "goto reject_box" {
		t.Fatalf("allowlist must end in reject: %s", rules)
	}
	all, _ := compileSpec(&Spec{Mode: "all"})
	ar, _ := compileBox(cfg, tag, all)
	if ar.rules[len(ar.rules)-1] != "accept" || strings.Contains(strings.Join(ar.rules, " "), "private") {
		t.Fatalf("all: %v", ar.rules)
	}
	if !strings.Contains(baseTableText(cfg), "203.0.113.7") {
		t.Fatal("SBX_EGRESS_ALWAYS_DENY not in never4")
	}
	if strings.Contains(baseTableText(cfg), "ct state established") {
		t.Fatal("established connections must be re-checked")
	}
	pod := newNftConfig(true, nil, 15353)
	pt := baseTableText(pod)
	for _, want := range []string{"hook output", `oifname "lo" accept`, "meta mark 0x5b5b accept", "meta mark 0x5b5b return", "redirect to :15353"} {
		if !strings.Contains(pt, want) {
			t.Errorf("pod table lacks %q", want)
		}
	}
	if pr, _ := compileBox(pod, tag, p); strings.Contains(strings.Join(pr.rules, "\n"), "oifname") {
		t.Error("pod rules name box bridges")
	}
}

// Overlapping blocks with ports multiply into set elements; a policy past the bound is a 400
// that says so, and computing that is quick (the review's 1000 entries once took 7.7 GB, 52 s).
func TestElementBound(t *testing.T) {
	s, batches := fakeServer(t, false)
	if err := s.install(nil); err != nil {
		t.Fatal(err)
	}
	spec := func(ranges, hosts int) string {
		var ts []string
		for i := 0; i < ranges; i++ {
			ts = append(ts, fmt.Sprintf(`{"host":"::/0","ports":[%d,%d],"protocol":"tcp"}`, 1+4*i, 1+4*i))
		}
		for i := 0; i < hosts; i++ {
			ts = append(ts, fmt.Sprintf(`{"host":"2001:db8:%x::%x","ports":[3,3],"protocol":"tcp"}`, (i*131)&0xffff, i+1))
		}
		return `{"addresses":["10.99.0.2"],"spec":{"mode":"allowlist","allow":[` + strings.Join(ts, ",") + `],"deny":[],"endpoints":[]}}`
	}
	h := s.handler()
	// The review's 1000 entries: 500 ranges around 500 holes, 500 holes with 501 ranges.
	// And the second review's: 32 ranges around 968 holes (62,952 elements, 186 s for the kernel).
	for _, c := range [][2]int{{300, 300}, {500, 500}, {32, 968}} {
		w := do(t, h, "PUT", "/v1/boxes/a", spec(c[0], c[1]))
		if w.Code != 400 || !strings.Contains(w.Body.String(), "more than 4096 set elements") {
			t.Fatalf("%v: %d %.200s", c, w.Code, w.Body)
		}
	}
	// 40 ranges around 40 holes was 40 x 40 x ~128 prefixes (over 200,000 elements); as address
	// ranges it is 41 x 40 + 40 x 41.
	if w := do(t, h, "PUT", "/v1/boxes/a", spec(40, 40)); w.Code != 200 {
		t.Fatalf("40 x 40: %d %s", w.Code, w.Body)
	}
	// 1000 addresses with a port each: one element each, well inside the bound.
	if w := do(t, h, "PUT", "/v1/boxes/a", spec(0, 1000)); w.Code != 200 {
		t.Fatalf("1000 addresses with ports: %d %.200s", w.Code, w.Body)
	}
	// The install, and one batch per accepted PUT: the refused ones reached no nft.
	if n := len(batches()); n != 3 {
		t.Fatalf("%d batches", n)
	}
}

// An allow block inside a private range only is checked after the always-denied: in pod mode
// with the node at 10.0.0.5, `allow 10.0.0.0/8` must not open the node; `allow 10.0.0.5/32`
// (inside an always-denied block) names it and comes first.
func TestPrivateAllowAfterAlwaysDenied(t *testing.T) {
	cfg := newNftConfig(true, []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}, 15353)
	pos := func(p *policy, want string) (int, int, int) {
		br, err := compileBox(cfg, "b", p)
		if err != nil {
			t.Fatal(err)
		}
		set := ""
		for _, st := range br.sets {
			if strings.Contains(st.decl, "elements = { "+want+" }") {
				set = "@" + st.name + " "
			}
		}
		at, never, private := -1, -1, -1
		for i, r := range br.rules {
			switch {
			case set != "" && strings.Contains(r, set):
				at = i
			case strings.Contains(r, "@never4 "):
				never = i
			case strings.Contains(r, "@private4 "):
				private = i
			}
		}
		if at < 0 || never < 0 || private < 0 {
			t.Fatalf("%s: no rule in %v", want, br.rules)
		}
		return at, never, private
	}
	wide, _ := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{{Host: "10.0.0.0/8"}}})
	if at, never, private := pos(wide, "10.0.0.0/8"); at < never || at > private {
		t.Fatalf("allow 10.0.0.0/8 at %d: want after the always-denied (%d), before private (%d)", at, never, private)
	}
	node, _ := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{{Host: "10.0.0.0/8"}, {Host: "10.0.0.5/32", Ports: ports(10250, 10250), Protocol: "tcp"}}})
	if at, never, _ := pos(node, "10.0.0.5 . tcp . 10250"); at > never {
		t.Fatalf("allow 10.0.0.5/32 at %d: want before the always-denied (%d)", at, never)
	}
}

// An allow block inside a wide always-denied block (the pod network) opens it, but not a narrower
// always-denied block inside the allowed one (the node's address on the pod network), unless an
// allow entry names that one as well.
func TestNamedBlockKeepsInnerNever(t *testing.T) {
	cfg := newNftConfig(true, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.1/32")}, 15353)
	order := func(p *policy) (inner, allow int) {
		br, err := compileBox(cfg, "b", p)
		if err != nil {
			t.Fatal(err)
		}
		inner, allow = -1, -1
		for i, r := range br.rules {
			switch {
			case strings.Contains(r, "@b_ni_a4 "):
				inner = i
			case strings.Contains(r, "@b_an_a4 "):
				allow = i
			}
		}
		return inner, allow
	}
	wide, _ := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{{Host: "10.244.1.0/24"}}})
	if inner, allow := order(wide); inner < 0 || allow < 0 || inner > allow {
		t.Fatalf("allow 10.244.1.0/24: the node's 10.244.1.1 rejected at %d, the block accepted at %d", inner, allow)
	}
	both, _ := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{{Host: "10.244.1.0/24"}, {Host: "10.244.1.1/32"}}})
	if inner, _ := order(both); inner >= 0 {
		t.Fatalf("an allow entry naming the node opens it: rejected at %d", inner)
	}
}

// DNS compares names in ASCII only: a KELVIN SIGN (U+212A, which strings.ToLower makes k) is not
// ok.test, neither in a spec nor in a query; such a query is NXDOMAIN and never forwarded.
func TestNonASCIIName(t *testing.T) {
	if _, err := compileSpec(&Spec{Mode: "allowlist", Allow: []Target{{Host: "o\u212a.test"}}}); err == nil {
		t.Error("spec host with KELVIN SIGN accepted")
	}
	s, _ := fakeServer(t, false)
	b, err := s.compileBoxInput("a", &PutBody{Addresses: []string{"10.99.0.2"}, Spec: &Spec{Mode: "allowlist", Allow: []Target{{Host: "ok.test"}}},
		DNS: []string{"127.0.0.1:1"}}) // nothing listens: a forwarded query ends in SERVFAIL
	if err != nil {
		t.Fatal(err)
	}
	if err := s.install([]*box{b}); err != nil {
		t.Fatal(err)
	}
	p := newProxy(s, false)
	for _, n := range []string{"o\u212a.test.", "ok.test\x00.", "o k.test."} {
		name, err := dnsmessage.NewName(n)
		if err != nil {
			t.Fatal(err)
		}
		q, err := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}).Pack()
		if err != nil {
			t.Fatal(err)
		}
		if r := p.handle(netip.MustParseAddr("10.99.0.2"), q, false); r == nil || r[3]&0x0f != byte(dnsmessage.RCodeNameError) {
			t.Fatalf("%q: %v, want NXDOMAIN", n, r)
		}
	}
}

// dnsQuery packs a query for name with the given id.
func dnsQuery(t *testing.T, name string, id uint16) []byte {
	q, err := (&dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// proxyLab: boxes at 127.0.0.1 and 127.0.0.2 (allowlist ok.test, upstream a UDP socket that never
// answers: a query for ok.test stays in flight for udpTimeout) and a proxy on loopback.
func proxyLab(t *testing.T) (udp *net.UDPConn, tcp net.Listener) {
	s, _ := fakeServer(t, false)
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	var boxes []*box
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		b, err := s.compileBoxInput("box"+a, &PutBody{Addresses: []string{a}, Spec: &Spec{Mode: "allowlist", Allow: []Target{{Host: "ok.test"}}},
			DNS: []string{hole.LocalAddr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
	}
	if err := s.install(boxes); err != nil {
		t.Fatal(err)
	}
	p := newProxy(s, false)
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close(); ln.Close() })
	go p.serveUDP(uc)
	go p.serveTCP(ln)
	return uc, ln
}

func rcodeOf(t *testing.T, resp []byte) dnsmessage.RCode {
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("bad answer: %v", err)
	}
	return m.RCode
}

// One box cannot take every TCP slot of the proxy: past its share its connections are closed,
// while another box is still served.
func TestDNSTCPPerSource(t *testing.T) {
	_, ln := proxyLab(t)
	ask := func(from string) ([]byte, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := writeTCPMessage(c, dnsQuery(t, "nope.test.", 1)); err != nil {
			return nil, err
		}
		return readTCPMessage(c)
	}
	for i := 0; i < maxTCPClientsPerSource; i++ {
		if r, err := ask("127.0.0.1"); err != nil || rcodeOf(t, r) != dnsmessage.RCodeNameError {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if r, err := ask("127.0.0.1"); err == nil {
		t.Fatalf("connection %d of one box answered: %v", maxTCPClientsPerSource+1, rcodeOf(t, r))
	}
	if r, err := ask("127.0.0.2"); err != nil || rcodeOf(t, r) != dnsmessage.RCodeNameError {
		t.Fatalf("another box: %v", err)
	}
}

// Nor every UDP slot: past its share of queries in flight a box gets REFUSED at once.
func TestDNSUDPPerSource(t *testing.T) {
	uc, _ := proxyLab(t)
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, uc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// These wait for an upstream that never answers (udpTimeout), holding their slots.
	for i := 0; i < maxUDPInflightPerSource; i++ {
		c.Write(dnsQuery(t, "ok.test.", uint16(i)))
	}
	c.Write(dnsQuery(t, "nope.test.", 9999))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var m dnsmessage.Message
		if m.Unpack(buf[:n]) == nil && m.ID == 9999 {
			if m.RCode != dnsmessage.RCodeRefused {
				t.Fatalf("query %d in flight of one box: %v, want REFUSED", maxUDPInflightPerSource+1, m.RCode)
			}
			return
		}
	}
}

// A box's learned sets are bounded: past maxLearned addresses the proxy refuses rather than grow.
func TestLearnedBound(t *testing.T) {
	s, _ := fakeServer(t, false)
	b, err := s.compileBoxInput("a", &PutBody{Addresses: []string{"10.99.0.2"}, Spec: &Spec{Mode: "allowlist", Allow: []Target{{Host: "*.ok.test"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.install([]*box{b}); err != nil {
		t.Fatal(err)
	}
	for _, st := range b.rules.sets {
		if !strings.Contains(st.decl, "size ") {
			t.Errorf("learned set without a size: %s", st.decl)
		}
	}
	cls := []class{{}}
	addrs := func(from, n int) []learned {
		var out []learned
		for i := from; i < from+n; i++ {
			out = append(out, learned{netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), time.Hour})
		}
		return out
	}
	if err := s.learn(b, "a.ok.test", []string{"a.ok.test"}, cls, nil, addrs(0, maxLearned-10)); err != nil {
		t.Fatal(err)
	}
	if err := s.learn(b, "b.ok.test", []string{"b.ok.test"}, cls, nil, addrs(maxLearned-10, 20)); !errors.Is(err, errLearnFull) {
		t.Fatalf("past the bound: %v", err)
	}
	// Addresses the box holds already are refreshed, not counted again.
	if err := s.learn(b, "a.ok.test", []string{"a.ok.test"}, cls, nil, addrs(0, 20)); err != nil {
		t.Fatal(err)
	}
}

func buildAnswer(t *testing.T, q string, rrs []dnsmessage.Resource) (dnsmessage.Question, []byte) {
	question := dnsmessage.Question{Name: dnsmessage.MustNewName(q), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, Response: true}, Questions: []dnsmessage.Question{question}, Answers: rrs}
	b, err := msg.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return question, b
}

func TestAnswerAddresses(t *testing.T) {
	h := func(name string, typ dnsmessage.Type, ttl uint32) dnsmessage.ResourceHeader {
		return dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET, TTL: ttl}
	}
	q, msg := buildAnswer(t, "WWW.ok.test.", []dnsmessage.Resource{
		{Header: h("www.ok.test.", dnsmessage.TypeCNAME, 60), Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("cdn.net.")}},
		{Header: h("cdn.net.", dnsmessage.TypeCNAME, 60), Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("edge.cdn.net.")}},
		{Header: h("edge.cdn.net.", dnsmessage.TypeA, 5), Body: &dnsmessage.AResource{A: [4]byte{198, 18, 0, 3}}},
		{Header: h("edge.cdn.net.", dnsmessage.TypeAAAA, 86400), Body: &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::3").As16()}},
		{Header: h("unrelated.test.", dnsmessage.TypeA, 60), Body: &dnsmessage.AResource{A: [4]byte{6, 6, 6, 6}}},
		{Header: h("edge.cdn.net.", dnsmessage.TypeTXT, 60), Body: &dnsmessage.TXTResource{TXT: []string{"x"}}},
	})
	names, addrs, err := answerAddresses(msg, q)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "www.ok.test,cdn.net,edge.cdn.net" {
		t.Fatalf("names %v", names)
	}
	if len(addrs) != 2 || addrs[0].addr.String() != "198.18.0.3" || addrs[0].ttl != minLearnTTL ||
		addrs[1].addr.String() != "2001:db8::3" || addrs[1].ttl != maxLearnTTL {
		t.Fatalf("addrs %+v", addrs)
	}
	if _, _, err := answerAddresses(msg[:len(msg)-3], q); err == nil {
		t.Fatal("truncated message parsed")
	}
}

func TestReplyAndSameQuery(t *testing.T) {
	q, _ := buildAnswer(t, "a.test.", nil)
	query, _ := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 9, RecursionDesired: true}, Questions: []dnsmessage.Question{q}}).Pack()
	var pr dnsmessage.Parser
	hdr, _ := pr.Start(query)
	r := reply(hdr, &q, dnsmessage.RCodeNameError)
	var m dnsmessage.Message
	if err := m.Unpack(r); err != nil || m.ID != 9 || !m.Response || m.RCode != dnsmessage.RCodeNameError || len(m.Questions) != 1 {
		t.Fatalf("reply %+v %v", m, err)
	}
	if !sameQuery(query, r) {
		t.Fatal("sameQuery refused the reply")
	}
	other := append([]byte(nil), r...)
	other[1]++
	if sameQuery(query, other) || sameQuery(query, r[:5]) {
		t.Fatal("sameQuery accepted a foreign answer")
	}
}

func TestParseUpstreams(t *testing.T) {
	ups, err := parseUpstreams([]string{"198.18.0.53", "198.18.0.53:5353", "[2001:db8::53]:53"})
	if err != nil || ups[0].Port() != 53 || ups[1].Port() != 5353 {
		t.Fatalf("%v %v", ups, err)
	}
	for _, bad := range []string{"x", "1.2.3.4:0", "0.0.0.0", "1.2.3.4:99999"} {
		if _, err := parseUpstreams([]string{bad}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "r"), []byte("# x\nnameserver 10.0.0.53\nnameserver bad\nsearch x\nnameserver ::1\n"), 0o600)
	if got := resolvConfServers(filepath.Join(dir, "r")); len(got) != 2 || got[0].String() != "10.0.0.53:53" {
		t.Fatalf("resolv.conf: %v", got)
	}
}

// fakeNft records each batch instead of running nft; fail makes the next batch fail.
func fakeServer(t *testing.T, pod bool) (*server, func() []string) {
	dir := t.TempDir()
	log := filepath.Join(dir, "nft.log")
	script := filepath.Join(dir, "nft")
	os.WriteFile(script, []byte("#!/bin/sh\n[ -e "+dir+"/fail ] && { echo failing >&2; exit 1; }\n{ cat; echo '----'; } >> "+log+"\n"), 0o700)
	s := newServer(newNftConfig(pod, nil, 15353), script, dir)
	return s, func() []string {
		data, _ := os.ReadFile(log)
		parts := strings.Split(string(data), "----\n")
		return parts[:len(parts)-1]
	}
}

func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestAPI(t *testing.T) {
	s, batches := fakeServer(t, false)
	if err := s.install(nil); err != nil {
		t.Fatal(err)
	}
	h := s.handler()
	good := `{"addresses":["10.99.0.2"],"spec":{"mode":"allowlist","allow":[{"host":"ok.test"}],"deny":[],"endpoints":[]},"dns":["198.18.0.53"]}`
	for _, c := range []struct{ path, body string }{
		{"/v1/boxes/a;b", good},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[{"host":"1.2.3.4/32; flush ruleset"}],"deny":[],"endpoints":[]}}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2; flush ruleset"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]},"extra":1}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"]}`},
		{"/v1/boxes/a", good + good},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]},"dns":["x"]}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"macs":["02:42:ac:12:00:05 } accept"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"macs":["00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[{"host":"a.test","bogus":1}],"deny":[],"endpoints":[]}}`},
		{"/v1/boxes/a", `{"addresses":["10.99.0.2"],"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]},"pad":"` + strings.Repeat("x", maxBodyBytes) + `"}`},
	} {
		if w := do(t, h, "PUT", c.path, c.body); w.Code != 400 && w.Code != 404 {
			t.Errorf("PUT %s %.80s: %d %s", c.path, c.body, w.Code, w.Body)
		}
	}
	if n := len(batches()); n != 1 {
		t.Fatalf("bad input reached nft: %d batches", n)
	}
	if w := do(t, h, "PUT", "/v1/boxes/a", good); w.Code != 200 || w.Body.String() != "{}\n" {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	// Same spec, the address moves to b: only map elements change, in one batch.
	if w := do(t, h, "PUT", "/v1/boxes/b", strings.Replace(good, "10.99.0.2", "10.99.0.3", 1)); w.Code != 200 {
		t.Fatal(w.Body)
	}
	if w := do(t, h, "PUT", "/v1/boxes/b", strings.Replace(good, `"10.99.0.2"`, `"10.99.0.3","10.99.0.2"`, 1)); w.Code != 200 {
		t.Fatal(w.Body)
	}
	bs := batches()
	last := bs[len(bs)-1]
	if !strings.Contains(last, "delete element inet sbx_egress box4 { 10.99.0.2 }") || !strings.Contains(last, "add element inet sbx_egress box4 { 10.99.0.2 : jump "+boxTag("b")+" }") ||
		strings.Contains(last, "add set") {
		t.Fatalf("move batch:\n%s", last)
	}
	var va boxView
	json.Unmarshal(do(t, h, "GET", "/v1/boxes/a", "").Body.Bytes(), &va)
	if len(va.Addresses) != 0 || va.Spec.Mode != "allowlist" {
		t.Fatalf("a after move: %+v", va)
	}
	var list []boxView
	json.Unmarshal(do(t, h, "GET", "/v1/boxes", "").Body.Bytes(), &list)
	if len(list) != 2 || list[1].ID != "b" || len(list[1].Addresses) != 2 {
		t.Fatalf("list %+v", list)
	}
	if w := do(t, h, "GET", "/v1/boxes/zz", ""); w.Code != 404 {
		t.Fatal(w.Code)
	}
	// A failing transaction changes nothing.
	os.WriteFile(filepath.Join(s.dir, "fail"), nil, 0o600)
	if w := do(t, h, "PUT", "/v1/boxes/c", strings.Replace(good, "10.99.0.2", "10.99.0.9", 1)); w.Code != 500 || !strings.Contains(w.Body.String(), "failing") {
		t.Fatalf("failing nft: %d %s", w.Code, w.Body)
	}
	os.Remove(filepath.Join(s.dir, "fail"))
	if w := do(t, h, "GET", "/v1/boxes/c", ""); w.Code != 404 {
		t.Fatal("failed PUT registered the box")
	}
	if w := do(t, h, "DELETE", "/v1/boxes/b", ""); w.Code != 204 {
		t.Fatal(w.Code)
	}
	if w := do(t, h, "DELETE", "/v1/boxes/unknown", ""); w.Code != 204 {
		t.Fatal(w.Code)
	}
	bs = batches()
	if last := bs[len(bs)-1]; !strings.Contains(last, "delete chain inet sbx_egress "+boxTag("b")) {
		t.Fatalf("delete batch:\n%s", last)
	}
	// state.json holds a; a new server rebuilds it in one batch.
	s2, batches2 := fakeServer(t, false)
	s2.dir = s.dir
	if err := s2.install(s2.loadState()); err != nil {
		t.Fatal(err)
	}
	b2 := batches2()
	if _, ok := s2.get("a"); !ok || len(b2) != 1 || !strings.HasPrefix(b2[0], "add table inet sbx_egress\ndelete table inet sbx_egress\n") ||
		!strings.Contains(b2[0], "add chain inet sbx_egress "+boxTag("a")) {
		t.Fatalf("restart: %v", b2)
	}
	if fi, err := os.Stat(filepath.Join(s.dir, "state.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state.json: %v %v", fi, err)
	}
}

// A start whose install fails keeps state.json: the boxes the kernel refused stay in it (and the
// health check says so) instead of a file rewritten without them, which lost their later changes.
func TestFailedInstallKeepsState(t *testing.T) {
	dir := t.TempDir()
	// This nft fails every batch that holds the text in dir/failtag.
	script := filepath.Join(dir, "nft")
	os.WriteFile(script, []byte("#!/bin/sh\nin=$(cat)\n[ -e "+dir+"/failtag ] && printf '%s' \"$in\" | grep -qF \"$(cat "+dir+"/failtag)\" && { echo failing >&2; exit 1; }\nexit 0\n"), 0o700)
	s := newServer(newNftConfig(false, nil, 15353), script, dir)
	if err := s.install(nil); err != nil {
		t.Fatal(err)
	}
	h := s.handler()
	body := func(addr, mode string) string {
		return `{"addresses":["` + addr + `"],"spec":{"mode":"` + mode + `","allow":[],"deny":[],"endpoints":[]}}`
	}
	for id, b := range map[string]string{"good": body("10.99.0.2", "all"), "bad": body("10.99.0.3", "denylist")} {
		if w := do(t, h, "PUT", "/v1/boxes/"+id, b); w.Code != 200 {
			t.Fatal(w.Code, w.Body)
		}
	}
	os.WriteFile(filepath.Join(dir, "failtag"), []byte("add chain inet sbx_egress "+boxTag("bad")), 0o600)
	s2 := newServer(newNftConfig(false, nil, 15353), script, dir)
	if err := s2.install(s2.loadState()); err != nil {
		t.Fatal(err)
	}
	h2 := s2.handler()
	if _, ok := s2.get("good"); !ok {
		t.Fatal("the box the kernel took is not registered")
	}
	if w := do(t, h2, "GET", "/v1/health", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "bad") {
		t.Fatalf("health with a box not installed: %d %s", w.Code, w.Body)
	}
	// A pending box is listed and got with its last spec, marked pending: a caller (sbx adopting
	// boxes, a box's start) must keep that spec, not fall back to an older one it holds.
	if w := do(t, h2, "GET", "/v1/boxes/bad", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"pending":true`) || !strings.Contains(w.Body.String(), `"denylist"`) {
		t.Fatalf("GET of a pending box: %d %s", w.Code, w.Body)
	}
	if w := do(t, h2, "GET", "/v1/boxes", ""); !strings.Contains(w.Body.String(), `"id":"bad"`) {
		t.Fatalf("list without the pending box: %s", w.Body)
	}
	if w := do(t, h2, "PUT", "/v1/boxes/c", body("10.99.0.4", "all")); w.Code != 200 {
		t.Fatal(w.Code, w.Body)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	for _, id := range []string{`"good"`, `"bad"`, `"c"`, `"denylist"`} {
		if !strings.Contains(string(data), id) {
			t.Fatalf("state.json lost %s: %s", id, data)
		}
	}
	// Once the kernel takes it, the retry puts the box in force with its last policy.
	if !s2.retryPending() {
		t.Fatal("the refused box is no longer pending")
	}
	os.Remove(filepath.Join(dir, "failtag"))
	if s2.retryPending() {
		t.Fatal("still pending")
	}
	if v, ok := s2.get("bad"); !ok || v.Spec.Mode != "denylist" {
		t.Fatalf("after retry: %+v", v)
	}
	if w := do(t, h2, "GET", "/v1/health", ""); w.Code != 200 {
		t.Fatalf("health: %d %s", w.Code, w.Body)
	}
}

func TestDefaultGateways(t *testing.T) {
	route4 := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0000F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	route6 := "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n" +
		"fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n"
	got := fmt.Sprint(defaultGateways(route4, route6))
	if got != "[10.244.0.1 fe80::1]" {
		t.Fatalf("gateways %s", got)
	}
}

func TestPodAPI(t *testing.T) {
	s, batches := fakeServer(t, true)
	b, err := s.compileBoxInput("self", &PutBody{Spec: &Spec{Mode: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.install([]*box{b}); err != nil {
		t.Fatal(err)
	}
	h := s.handler()
	if w := do(t, h, "PUT", "/v1/boxes/other", `{"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`); w.Code != 404 {
		t.Fatal(w.Code)
	}
	if w := do(t, h, "PUT", "/v1/boxes/self", `{"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}}`); w.Code != 200 {
		t.Fatal(w.Code, w.Body)
	}
	bs := batches()
	if !strings.Contains(bs[0], "hook output") || !strings.HasPrefix(bs[1], "flush chain inet sbx_egress box\n") || !strings.Contains(bs[1], "add rule inet sbx_egress box accept") {
		t.Fatalf("batches %q", bs)
	}
	if s.boxFor(netip.MustParseAddr("192.0.2.1")) == nil {
		t.Fatal("pod mode: every source is the box")
	}
}

func TestDecodeStrictBody(t *testing.T) {
	var b PutBody
	if err := decodeStrict(bytes.NewReader([]byte(`{"spec":{"mode":"all","allow":[],"deny":[],"endpoints":[]}} x`)), &b); err == nil {
		t.Fatal("trailing data accepted")
	}
}

// No message a box sends may crash the proxy: random bytes, and valid queries with bytes flipped.
func TestHandleGarbage(t *testing.T) {
	s, _ := fakeServer(t, false)
	b, _ := s.compileBoxInput("a", &PutBody{Addresses: []string{"10.99.0.2"}, Spec: &Spec{Mode: "allowlist", Allow: []Target{{Host: "ok.test"}}}})
	if err := s.install([]*box{b}); err != nil {
		t.Fatal(err)
	}
	p := newProxy(s, false)
	src := netip.MustParseAddr("10.99.0.2")
	q, _ := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 1, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("nope.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}).Pack()
	if r := p.handle(src, q, false); r == nil || r[3]&0x0f != byte(dnsmessage.RCodeNameError) {
		t.Fatalf("nope.test: %v", r)
	}
	if r := p.handle(netip.MustParseAddr("10.99.0.3"), q, false); r == nil || r[3]&0x0f != byte(dnsmessage.RCodeRefused) {
		t.Fatalf("stranger: %v", r)
	}
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 20000; i++ {
		var m []byte
		if i%2 == 0 {
			m = make([]byte, rng.Intn(600))
			rng.Read(m)
		} else {
			m = append([]byte(nil), q...)
			for k := 0; k < 1+rng.Intn(4); k++ {
				m[rng.Intn(len(m))] = byte(rng.Intn(256))
			}
			m = m[:rng.Intn(len(m)+1)]
		}
		p.handle(src, m, i%3 == 0) // must return, never panic; allowed names need an upstream: none here
	}
}
