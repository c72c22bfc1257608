package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The DNS proxy: every query of a box whose policy names domains is redirected here (nft
// dnsredirect). A name no rule allows (allowlist, none) or a name denied without ports is answered
// NXDOMAIN here and never leaves; an allowed query goes to the box's upstreams, and the A/AAAA
// records of the answer are put in the box's learned sets before the answer is sent on.

const (
	minLearnTTL     = 30 * time.Second
	maxLearnTTL     = time.Hour
	udpTimeout      = 2 * time.Second
	tcpTimeout      = 5 * time.Second
	clientIdle      = 10 * time.Second
	maxTCPQueries   = 100
	maxUDPInflight  = 512
	maxTCPClients   = 128
	maxMessageBytes = 65535
	// Per source address (node mode: per box), so that one box cannot take every slot of the
	// global bounds above and stall every other box's DNS.
	maxUDPInflightPerSource = 64
	maxTCPClientsPerSource  = 8
)

type proxy struct {
	s    *server
	mark bool // pod mode: upstream sockets carry SO_MARK dnsMark so nft lets them pass
	udp  chan struct{}
	tcp  chan struct{}
	// perSource: node mode counts what each source holds (pod mode has the one box).
	perSource bool
	mu        sync.Mutex
	udpBy     map[netip.Addr]int
	tcpBy     map[netip.Addr]int
}

func newProxy(s *server, mark bool) *proxy {
	return &proxy{s: s, mark: mark, udp: make(chan struct{}, maxUDPInflight), tcp: make(chan struct{}, maxTCPClients),
		perSource: !mark, udpBy: map[netip.Addr]int{}, tcpBy: map[netip.Addr]int{}}
}

// take counts one more slot for src in m unless it holds max already.
func (p *proxy) take(m map[netip.Addr]int, src netip.Addr, max int) bool {
	if !p.perSource {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if m[src] >= max {
		return false
	}
	m[src]++
	return true
}

func (p *proxy) give(m map[netip.Addr]int, src netip.Addr) {
	if !p.perSource {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if m[src]--; m[src] <= 0 {
		delete(m, src)
	}
}

// refuse answers REFUSED to a query without looking further (a source over its share).
func refuse(q []byte) []byte {
	var parser dnsmessage.Parser
	hdr, err := parser.Start(q)
	if err != nil || hdr.Response {
		return nil
	}
	question, err := parser.Question()
	if err != nil {
		return reply(hdr, nil, dnsmessage.RCodeRefused)
	}
	return reply(hdr, &question, dnsmessage.RCodeRefused)
}

func (p *proxy) serveUDP(conn *net.UDPConn) {
	for {
		buf := make([]byte, maxMessageBytes)
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.Printf("dns udp: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		from := src.Addr().Unmap()
		if !p.take(p.udpBy, from, maxUDPInflightPerSource) {
			if resp := refuse(buf[:n]); resp != nil {
				conn.WriteToUDPAddrPort(resp, src)
			}
			continue
		}
		select {
		case p.udp <- struct{}{}:
		default:
			p.give(p.udpBy, from)
			continue // overloaded: drop, the client retries
		}
		go func() {
			defer func() { <-p.udp; p.give(p.udpBy, from) }()
			defer recoverLog("dns udp")
			if resp := p.handle(src.Addr(), buf[:n], false); resp != nil {
				conn.WriteToUDPAddrPort(resp, src)
			}
		}()
	}
}

func (p *proxy) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.Printf("dns tcp: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		from := src.Addr().Unmap()
		if !p.take(p.tcpBy, from, maxTCPClientsPerSource) {
			c.Close()
			continue
		}
		select {
		case p.tcp <- struct{}{}:
		default:
			p.give(p.tcpBy, from)
			c.Close()
			continue
		}
		go func() {
			defer func() { <-p.tcp; p.give(p.tcpBy, from) }()
			defer c.Close()
			defer recoverLog("dns tcp")
			r := bufio.NewReader(c)
			for i := 0; i < maxTCPQueries; i++ {
				c.SetDeadline(time.Now().Add(clientIdle))
				q, err := readTCPMessage(r)
				if err != nil {
					return
				}
				resp := p.handle(src.Addr(), q, true)
				if resp == nil {
					return
				}
				if writeTCPMessage(c, resp) != nil {
					return
				}
			}
		}()
	}
}

// recoverLog keeps one bad message from ending the helper (and with it DNS for every box).
func recoverLog(what string) {
	if r := recover(); r != nil {
		log.Printf("%s: recovered: %v", what, r)
	}
}

func readTCPMessage(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n < 12 {
		return nil, errors.New("short message")
	}
	msg := make([]byte, n)
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeTCPMessage(w io.Writer, msg []byte) error {
	if len(msg) > maxMessageBytes {
		return errors.New("message too long")
	}
	out := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(out, uint16(len(msg)))
	copy(out[2:], msg)
	_, err := w.Write(out)
	return err
}

// verdict is what the policy says about a query name.
type verdict struct {
	nxdomain bool
	allow    []class // classes of the allow rules the name matches
}

func decide(pol *policy, name string) verdict {
	var v verdict
	for _, r := range pol.deny {
		if !r.hasPorts && r.matches(name) {
			return verdict{nxdomain: true}
		}
	}
	for _, r := range pol.allow {
		if r.matches(name) {
			v.allow = appendClass(v.allow, r.class())
		}
	}
	if len(v.allow) == 0 && (pol.mode == "allowlist" || pol.mode == "none") {
		v.nxdomain = true
	}
	return v
}

// denyClasses: the port-scoped deny rules that match any name of the answer's chain.
func denyClasses(pol *policy, names []string) []class {
	var out []class
	for _, r := range pol.deny {
		if !r.hasPorts {
			continue
		}
		for _, n := range names {
			if r.matches(n) {
				out = appendClass(out, r.class())
			}
		}
	}
	return out
}

func deniedOutright(pol *policy, names []string) bool {
	for _, r := range pol.deny {
		if r.hasPorts {
			continue
		}
		for _, n := range names {
			if r.matches(n) {
				return true
			}
		}
	}
	return false
}

func appendClass(cs []class, c class) []class {
	for _, x := range cs {
		if x == c {
			return cs
		}
	}
	return append(cs, c)
}

// handle answers one query; nil means send nothing (not a query we can even answer).
func (p *proxy) handle(src netip.Addr, q []byte, tcp bool) []byte {
	var parser dnsmessage.Parser
	hdr, err := parser.Start(q)
	if err != nil || hdr.Response {
		return nil
	}
	questions, err := parser.AllQuestions()
	if err != nil || len(questions) != 1 {
		return reply(hdr, nil, dnsmessage.RCodeFormatError)
	}
	question := questions[0]
	if hdr.OpCode != 0 {
		return reply(hdr, &question, dnsmessage.RCodeNotImplemented)
	}
	b := p.s.boxFor(src)
	if b == nil {
		return reply(hdr, &question, dnsmessage.RCodeRefused)
	}
	if !plainName(question.Name.String()) {
		return reply(hdr, &question, dnsmessage.RCodeNameError)
	}
	name := normalizeName(question.Name.String())
	v := decide(b.pol, name)
	if v.nxdomain {
		return reply(hdr, &question, dnsmessage.RCodeNameError)
	}
	resp, full, err := p.exchange(p.s.upstreamsFor(b), q, tcp)
	if err != nil {
		log.Printf("dns: %s from %s: %v", name, src, err)
		return reply(hdr, &question, dnsmessage.RCodeServerFailure)
	}
	names, addrs, err := answerAddresses(full, question)
	if err != nil {
		return reply(hdr, &question, dnsmessage.RCodeServerFailure)
	}
	if deniedOutright(b.pol, names) {
		return reply(hdr, &question, dnsmessage.RCodeNameError)
	}
	if err := p.s.learn(b, name, names, v.allow, denyClasses(b.pol, names), addrs); errors.Is(err, errLearnFull) {
		return reply(hdr, &question, dnsmessage.RCodeRefused)
	} else if err != nil {
		log.Printf("dns: %s from %s: learning the answer: %v", name, src, err)
		return reply(hdr, &question, dnsmessage.RCodeServerFailure)
	}
	binary.BigEndian.PutUint16(resp, hdr.ID)
	return resp
}

// reply builds an answer without records (NXDOMAIN, REFUSED, SERVFAIL, FORMERR).
func reply(q dnsmessage.Header, question *dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: q.ID, Response: true, OpCode: q.OpCode, RecursionDesired: q.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	if question != nil {
		if b.StartQuestions() != nil || b.Question(*question) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// answerAddresses walks the answer section from the question's name along CNAMEs and returns the
// names of the chain and the A/AAAA addresses found for them, each with its TTL clamped.
func answerAddresses(msg []byte, question dnsmessage.Question) ([]string, []learned, error) {
	var parser dnsmessage.Parser
	if _, err := parser.Start(msg); err != nil {
		return nil, nil, err
	}
	if err := parser.SkipAllQuestions(); err != nil {
		return nil, nil, err
	}
	type rec struct {
		name, target string
		addr         netip.Addr
		ttl          uint32
	}
	var recs []rec
	for {
		h, err := parser.AnswerHeader()
		if err == dnsmessage.ErrSectionDone {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		r := rec{name: normalizeName(h.Name.String()), ttl: h.TTL}
		switch h.Type {
		case dnsmessage.TypeA:
			a, err := parser.AResource()
			if err != nil {
				return nil, nil, err
			}
			r.addr = netip.AddrFrom4(a.A)
		case dnsmessage.TypeAAAA:
			a, err := parser.AAAAResource()
			if err != nil {
				return nil, nil, err
			}
			r.addr = netip.AddrFrom16(a.AAAA).Unmap()
		case dnsmessage.TypeCNAME:
			c, err := parser.CNAMEResource()
			if err != nil {
				return nil, nil, err
			}
			r.target = normalizeName(c.CNAME.String())
		default:
			if err := parser.SkipAnswer(); err != nil {
				return nil, nil, err
			}
			continue
		}
		recs = append(recs, r)
	}
	chain := map[string]bool{normalizeName(question.Name.String()): true}
	names := []string{normalizeName(question.Name.String())}
	for changed := true; changed; {
		changed = false
		for _, r := range recs {
			if r.target != "" && chain[r.name] && !chain[r.target] {
				chain[r.target] = true
				names = append(names, r.target)
				changed = true
			}
		}
	}
	var addrs []learned
	for _, r := range recs {
		if r.addr.IsValid() && chain[r.name] {
			ttl := time.Duration(r.ttl) * time.Second
			if ttl < minLearnTTL {
				ttl = minLearnTTL
			}
			if ttl > maxLearnTTL {
				ttl = maxLearnTTL
			}
			addrs = append(addrs, learned{r.addr, ttl})
		}
	}
	return names, addrs, nil
}

// exchange forwards q to the upstreams in turn. resp is what goes back to the client (over UDP a
// truncated answer stays truncated, so the client asks again over TCP); full is the complete
// answer the addresses are learned from (fetched over TCP when the UDP one was truncated).
func (p *proxy) exchange(ups []netip.AddrPort, q []byte, tcp bool) (resp, full []byte, err error) {
	if len(ups) == 0 {
		return nil, nil, errors.New("no upstream DNS servers")
	}
	err = errors.New("no upstream answered")
	for _, up := range ups {
		if tcp {
			if resp, err = p.ask(up, q, true); err == nil {
				return resp, resp, nil
			}
			continue
		}
		if resp, err = p.ask(up, q, false); err != nil {
			continue
		}
		if resp[2]&0x02 == 0 { // TC bit
			return resp, resp, nil
		}
		if full, err = p.ask(up, q, true); err == nil {
			return resp, full, nil
		}
	}
	return nil, nil, err
}

// ask sends q to one upstream under a random id and returns the answer (with that id) once its id
// and question match: a spoofed or stray datagram is ignored.
func (p *proxy) ask(up netip.AddrPort, q []byte, tcp bool) ([]byte, error) {
	msg := append([]byte(nil), q...)
	var id [2]byte
	rand.Read(id[:])
	copy(msg, id[:])
	network, timeout := "udp", udpTimeout
	if tcp {
		network, timeout = "tcp", tcpTimeout
	}
	d := net.Dialer{Timeout: timeout}
	if p.mark {
		d.Control = markSocket
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if tcp {
		if err := writeTCPMessage(c, msg); err != nil {
			return nil, err
		}
		resp, err := readTCPMessage(bufio.NewReader(c))
		if err != nil {
			return nil, err
		}
		if !sameQuery(msg, resp) {
			return nil, errors.New("upstream answered another query")
		}
		return resp, nil
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, maxMessageBytes)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 12 && sameQuery(msg, buf[:n]) {
			return buf[:n], nil
		}
	}
}

// sameQuery: resp answers q (same id, a response, the same question).
func sameQuery(q, resp []byte) bool {
	if len(resp) < 12 || resp[0] != q[0] || resp[1] != q[1] {
		return false
	}
	var pq, pr dnsmessage.Parser
	hq, err1 := pq.Start(q)
	hr, err2 := pr.Start(resp)
	if err1 != nil || err2 != nil || !hr.Response || hq.ID != hr.ID {
		return false
	}
	a, err1 := pq.Question()
	b, err2 := pr.Question()
	return err1 == nil && err2 == nil && a.Type == b.Type && a.Class == b.Class &&
		strings.EqualFold(a.Name.String(), b.Name.String())
}

func markSocket(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, dnsMark)
	})
	if err != nil {
		return err
	}
	return serr
}

// resolvConfServers reads the nameservers of a resolv.conf (the upstreams when a PUT names none).
func resolvConfServers(path string) []netip.AddrPort {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Zone() == "" {
				out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
			}
		}
	}
	return out
}

// listenDNS opens the proxy's UDP and TCP sockets on addr and serves them until closed.
func (p *proxy) listen(addr string) (func(), error) {
	uaddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	uc, err := net.ListenUDP("udp", uaddr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		uc.Close()
		return nil, err
	}
	var once sync.Once
	go p.serveUDP(uc)
	go p.serveTCP(ln)
	return func() { once.Do(func() { uc.Close(); ln.Close() }) }, nil
}
