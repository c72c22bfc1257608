// nettool: a static network client for use inside boxes, whose busybox has no UDP client and no
// DNS client that names the server it asks. scripts/fakenet.sh builds it; tests bind it into boxes.
//
//	nettool [-timeout 3s] udp <addr:port> <msg>   send msg, print the reply
//	nettool [-timeout 3s] tcp <addr:port>         connect, print "ok"
//	nettool [-timeout 3s] [-tcp] [-type A] dns <server:port> <name>
//	                                              one query to that server: an answer per line
//	                                              ("A 198.18.0.1", "CNAME ok.test."), or the rcode
//	nettool [-timeout 3s] [-ca ca.pem] get <url>  HTTP(S) GET, print the body (TLS verified
//	                                              against -ca, or the system roots without it)
//	nettool [-timeout 3s] hold <addr:port>        connect to an echo server, print "connected",
//	                                              then send a line every 100 ms and read it back
//	                                              until that fails (an open connection was cut)
//
// Exit status: 0 success, 1 network error or timeout (the error on stderr), 2 usage, 3 the DNS
// server answered with an error rcode (NXDOMAIN, REFUSED, ...; printed on stdout).
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	timeout := flag.Duration("timeout", 3*time.Second, "for each connect and each reply")
	overTCP := flag.Bool("tcp", false, "dns: query over TCP")
	qtype := flag.String("type", "A", "dns: A, AAAA, CNAME or TXT")
	caFile := flag.String("ca", "", "get: PEM file of the CA to trust")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: nettool [-timeout D] udp ADDR MSG | tcp ADDR | [-tcp] [-type T] dns SERVER NAME | [-ca FILE] get URL | hold ADDR")
	}
	flag.Parse()
	args := flag.Args()
	var err error
	switch {
	case len(args) == 3 && args[0] == "udp":
		err = udp(args[1], args[2], *timeout)
	case len(args) == 2 && args[0] == "tcp":
		err = tcpConnect(args[1], *timeout)
	case len(args) == 3 && args[0] == "dns":
		err = dns(args[1], args[2], *qtype, *overTCP, *timeout)
	case len(args) == 2 && args[0] == "get":
		err = get(args[1], *caFile, *timeout)
	case len(args) == 2 && args[0] == "hold":
		err = hold(args[1], *timeout)
	default:
		flag.Usage()
		os.Exit(2)
	}
	var rc rcodeError
	if errors.As(err, &rc) {
		fmt.Println(rc.Error())
		os.Exit(3)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettool:", err)
		os.Exit(1)
	}
}

func udp(addr, msg string, timeout time.Duration) error {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Println(strings.TrimSuffix(string(buf[:n]), "\n"))
	return nil
}

func tcpConnect(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	c.Close()
	fmt.Println("ok")
	return nil
}

func get(url, caFile string, timeout time.Duration) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	res, err := (&http.Client{Transport: tr, Timeout: timeout}).Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	_, err = os.Stdout.Write(body)
	return err
}

func hold(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("connected")
	r := bufio.NewReader(c)
	for i := 0; ; i++ {
		line := fmt.Sprintf("tick %d\n", i)
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := io.WriteString(c, line); err != nil {
			return fmt.Errorf("after %d lines: %w", i, err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("after %d lines: %w", i, err)
		}
		if got != line {
			return fmt.Errorf("after %d lines: echo %q, want %q", i, got, line)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type rcodeError dnsmessage.RCode

func (e rcodeError) Error() string {
	switch dnsmessage.RCode(e) {
	case dnsmessage.RCodeFormatError:
		return "FORMERR"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeNotImplemented:
		return "NOTIMP"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	}
	return fmt.Sprintf("RCODE%d", int(e))
}

var types = map[string]dnsmessage.Type{"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "CNAME": dnsmessage.TypeCNAME, "TXT": dnsmessage.TypeTXT}

func dns(server, name, qtype string, overTCP bool, timeout time.Duration) error {
	t, ok := types[strings.ToUpper(qtype)]
	if !ok {
		return fmt.Errorf("unknown query type %q", qtype)
	}
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return err
	}
	id := uint16(time.Now().UnixNano())
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: t, Class: dnsmessage.ClassINET}},
	}
	query, err := q.Pack()
	if err != nil {
		return err
	}
	var reply []byte
	if !overTCP {
		reply, err = exchangeUDP(server, query, timeout)
		if err != nil {
			return err
		}
		var h dnsmessage.Header
		var p dnsmessage.Parser
		if h, err = p.Start(reply); err == nil && h.Truncated {
			overTCP = true
		}
	}
	if overTCP {
		if reply, err = exchangeTCP(server, query, timeout); err != nil {
			return err
		}
	}
	var m dnsmessage.Message
	if err := m.Unpack(reply); err != nil {
		return err
	}
	if m.Header.ID != id {
		return fmt.Errorf("reply id %d, want %d", m.Header.ID, id)
	}
	if m.Header.RCode != dnsmessage.RCodeSuccess {
		return rcodeError(m.Header.RCode)
	}
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			fmt.Printf("A %s\n", net.IP(b.A[:]))
		case *dnsmessage.AAAAResource:
			fmt.Printf("AAAA %s\n", net.IP(b.AAAA[:]))
		case *dnsmessage.CNAMEResource:
			fmt.Printf("CNAME %s\n", b.CNAME)
		case *dnsmessage.TXTResource:
			fmt.Printf("TXT %s\n", strings.Join(b.TXT, ""))
		default:
			fmt.Printf("%s\n", a.Header.Type)
		}
	}
	return nil
}

func exchangeUDP(server string, query []byte, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("udp", server, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func exchangeTCP(server string, query []byte, timeout time.Duration) ([]byte, error) {
	c, err := net.DialTimeout("tcp", server, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	reply := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		return nil, err
	}
	return reply, nil
}
