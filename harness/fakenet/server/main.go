// sbx-fakenet: the servers of the fake internet, run by scripts/fakenet.sh inside the sbx-inet
// network namespace (`ip netns exec`). Every listener binds one address of the namespace, so a
// test can tell hosts apart by address: web hosts (HTTP :80 and :8000, HTTPS :443), an echo host
// (UDP and TCP :7), the zone's DNS server and a "foreign" resolver that answers every name and
// logs what it was asked (the proof that a box's query did or did not leave by another resolver).
//
// Usage: sbx-fakenet -state DIR
// Writes DIR/ca.pem (a test CA made at start), DIR/foreign.log, and DIR/pid last, once every
// listener is bound: the script's readiness signal.
//
// tlssha1=1: busybox wget (the boxes' HTTPS client) sends no signature_algorithms in its TLS 1.2
// ClientHello, which Go refuses by default (RFC 9155); with SHA-1 signatures allowed it connects.
//
//go:debug tlssha1=1
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The layout; scripts/fakenet.sh puts these addresses on the namespace's side of the veth and
// src/testing/fakenet.ts names them for the tests: keep the three in step.
var (
	webAddrs    = []string{"198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "2001:db8:5b::1", "169.254.169.254"}
	echoAddr    = "198.18.0.7"
	dnsAddr     = "198.18.0.53"
	foreignAddr = "198.18.0.54"
	// What the foreign resolver answers for every A query: a reachable web host, so a box that
	// got an answer from it could use it; the log, not the answer, is what tests check.
	foreignAnswer = netip.MustParseAddr("198.18.0.2")
)

const ttl = 30

type record struct {
	a     []netip.Addr
	aaaa  []netip.Addr
	cname string
	txt   []string
}

func ips(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// bigTXT makes big.test's TXT answer larger than 512 bytes: over UDP without EDNS it comes back
// truncated (TC), so a DNS proxy's TCP path gets exercised.
func bigTXT() []string {
	out := make([]string, 8)
	for i := range out {
		out[i] = fmt.Sprintf("%d-%s", i, strings.Repeat("x", 120))
	}
	return out
}

var zone = map[string]record{
	"ok.test.":               {a: ips("198.18.0.1")},
	"other.test.":            {a: ips("198.18.0.2")},
	"api.example.test.":      {a: ips("198.18.0.3")},
	"deep.sub.example.test.": {a: ips("198.18.0.4")},
	"cname.test.":            {cname: "ok.test."},
	"v6.test.":               {aaaa: ips("2001:db8:5b::1")},
	"big.test.":              {a: ips("198.18.0.1"), txt: bigTXT()},
}

func main() {
	state := flag.String("state", "", "directory for ca.pem, foreign.log and pid")
	flag.Parse()
	if *state == "" {
		log.Fatal("-state is required")
	}
	log.SetPrefix("sbx-fakenet: ")
	if err := run(*state); err != nil {
		log.Fatal(err)
	}
	select {}
}

func run(state string) error {
	certPEM, keyPEM, caPEM, err := makeCerts()
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(state, "ca.pem"), caPEM); err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}}

	web := &http.Server{Handler: http.HandlerFunc(hello), ReadHeaderTimeout: 10 * time.Second}
	webTLS := &http.Server{Handler: http.HandlerFunc(hello), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	// Bind everything first, serve after: DIR/pid then means every port accepts.
	var serve []func()
	for _, a := range webAddrs {
		for _, port := range []string{"80", "8000"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, port))
			if err != nil {
				return err
			}
			serve = append(serve, func() { log.Print(web.Serve(ln)) })
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "443"))
		if err != nil {
			return err
		}
		serve = append(serve, func() { log.Print(webTLS.Serve(tls.NewListener(ln, tlsConf))) })
	}

	echoUDP, err := net.ListenPacket("udp", net.JoinHostPort(echoAddr, "7"))
	if err != nil {
		return err
	}
	serve = append(serve, func() { udpEcho(echoUDP) })
	echoTCP, err := net.Listen("tcp", net.JoinHostPort(echoAddr, "7"))
	if err != nil {
		return err
	}
	serve = append(serve, func() { tcpEcho(echoTCP) })

	logFile, err := os.OpenFile(filepath.Join(state, "foreign.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	foreign := &foreignResolver{log: logFile}
	for _, s := range []struct {
		addr   string
		answer func(q dnsmessage.Question, from string) (dnsmessage.RCode, []dnsmessage.Resource)
	}{{dnsAddr, zoneAnswer}, {foreignAddr, foreign.answer}} {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(s.addr, "53"))
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(s.addr, "53"))
		if err != nil {
			return err
		}
		answer := s.answer
		serve = append(serve, func() { dnsUDP(pc, answer) }, func() { dnsTCP(ln, answer) })
	}

	for _, f := range serve {
		go f()
	}
	return writeAtomic(filepath.Join(state, "pid"), []byte(strconv.Itoa(os.Getpid())+"\n"))
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// hello says which address and Host served the request: `hello from 198.18.0.1 host=ok.test`.
// /bytes/<n> answers n bytes instead, for throughput measurements.
func hello(w http.ResponseWriter, r *http.Request) {
	if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
		size, err := strconv.ParseInt(n, 10, 64)
		if err != nil || size < 0 || size > 1<<30 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = io.CopyN(w, zeros{}, size)
		return
	}
	local := "?"
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, _, err := net.SplitHostPort(a.String()); err == nil {
			local = host
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // a v6 literal without a port
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "hello from %s host=%s\n", local, host)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func udpEcho(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			log.Print(err)
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

func tcpEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Print(err)
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// zoneAnswer is the authoritative server of the test zone: A/AAAA/TXT from the table, CNAMEs
// followed within the zone, NXDOMAIN for every other name.
func zoneAnswer(q dnsmessage.Question, _ string) (dnsmessage.RCode, []dnsmessage.Resource) {
	name := strings.ToLower(q.Name.String())
	var out []dnsmessage.Resource
	for range 8 {
		rec, ok := zone[name]
		if !ok {
			if len(out) > 0 {
				return dnsmessage.RCodeSuccess, out
			}
			return dnsmessage.RCodeNameError, nil
		}
		if rec.cname != "" {
			out = append(out, dnsmessage.Resource{Header: hdr(name, dnsmessage.TypeCNAME), Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(rec.cname)}})
			if q.Type == dnsmessage.TypeCNAME {
				return dnsmessage.RCodeSuccess, out
			}
			name = rec.cname
			continue
		}
		switch q.Type {
		case dnsmessage.TypeA:
			for _, a := range rec.a {
				out = append(out, dnsmessage.Resource{Header: hdr(name, q.Type), Body: &dnsmessage.AResource{A: a.As4()}})
			}
		case dnsmessage.TypeAAAA:
			for _, a := range rec.aaaa {
				out = append(out, dnsmessage.Resource{Header: hdr(name, q.Type), Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		case dnsmessage.TypeTXT:
			for _, t := range rec.txt {
				out = append(out, dnsmessage.Resource{Header: hdr(name, q.Type), Body: &dnsmessage.TXTResource{TXT: []string{t}}})
			}
		}
		return dnsmessage.RCodeSuccess, out
	}
	return dnsmessage.RCodeServerFailure, nil
}

func hdr(name string, t dnsmessage.Type) dnsmessage.ResourceHeader {
	return dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET, TTL: ttl}
}

type foreignResolver struct {
	mu  sync.Mutex
	log *os.File
}

// answer logs `<name> <type> <client>` (name lower case, no trailing dot) and answers every A
// query with foreignAnswer.
func (f *foreignResolver) answer(q dnsmessage.Question, from string) (dnsmessage.RCode, []dnsmessage.Resource) {
	name := strings.ToLower(q.Name.String())
	f.mu.Lock()
	fmt.Fprintf(f.log, "%s %s %s\n", strings.TrimSuffix(name, "."), strings.TrimPrefix(q.Type.String(), "Type"), from)
	f.mu.Unlock()
	if q.Type != dnsmessage.TypeA {
		return dnsmessage.RCodeSuccess, nil
	}
	return dnsmessage.RCodeSuccess, []dnsmessage.Resource{{Header: hdr(name, q.Type), Body: &dnsmessage.AResource{A: foreignAnswer.As4()}}}
}

type answerFunc = func(q dnsmessage.Question, from string) (dnsmessage.RCode, []dnsmessage.Resource)

// respond builds the reply to one query; limit is the largest reply the transport takes (UDP:
// 512 or the client's EDNS size), beyond which the answers are dropped and TC set.
func respond(query []byte, from string, answer answerFunc, udp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || h.Response {
		return nil
	}
	limit := 65535
	if udp {
		limit = 512
		_ = p.SkipAllAnswers()
		_ = p.SkipAllAuthorities()
		if adds, err := p.AllAdditionals(); err == nil {
			for _, a := range adds {
				if a.Header.Type == dnsmessage.TypeOPT && int(a.Header.Class) > limit {
					limit = int(a.Header.Class)
				}
			}
		}
	}
	reply := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: dnsmessage.RCodeFormatError},
		Questions: qs,
	}
	if len(qs) == 1 {
		reply.Header.RCode, reply.Answers = answer(qs[0], from)
	}
	out, err := reply.Pack()
	if err != nil {
		log.Print(err)
		return nil
	}
	if len(out) > limit {
		reply.Header.Truncated = true
		reply.Answers = nil
		out, _ = reply.Pack()
	}
	return out
}

func dnsUDP(pc net.PacketConn, answer answerFunc) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			log.Print(err)
			return
		}
		if out := respond(buf[:n], hostOf(from), answer, true); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

func dnsTCP(ln net.Listener, answer answerFunc) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Print(err)
			return
		}
		go func() {
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				out := respond(q, hostOf(c.RemoteAddr()), answer, false)
				if out == nil {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
					return
				}
			}
		}()
	}
}

func hostOf(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// makeCerts makes a test CA and one server certificate for every zone name and web address.
func makeCerts() (certPEM, keyPEM, caPEM []byte, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sbx fakenet test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "ok.test"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"*.test", "*.example.test"},
	}
	for name := range zone {
		tmpl.DNSNames = append(tmpl.DNSNames, strings.TrimSuffix(name, "."))
	}
	for _, a := range append(append([]string{}, webAddrs...), echoAddr, dnsAddr, foreignAddr) {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(a))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
