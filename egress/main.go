// sbx-egress enforces sbx's egress policies (issue 28, docs/network.md) with nftables.
//
//	sbx-egress node          one per Docker engine: host netns, forward hook, boxes keyed by address
//	sbx-egress pod           Kubernetes native sidecar in the box's pod netns: output hook, one box "self"
//	sbx-egress call M /PATH  the HTTP API over the unix socket (body on stdin), for docker/kubectl exec
//	sbx-egress ready [--wait] exit 0 once the policy is applied and the API answers (--wait: poll until then; postStart)
//
// Environment: SBX_EGRESS_DIR (socket and state.json, default /run/sbx-egress), SBX_EGRESS_NFT
// (nft binary), SBX_EGRESS_DNS_PORT (15353), SBX_EGRESS_ALWAYS_DENY and SBX_EGRESS_HOST_ADDRESSES
// (comma lists of addresses/CIDRs always denied), SBX_EGRESS_RESOLV_CONF (/etc/resolv.conf),
// SBX_EGRESS_SPEC (pod: JSON {spec, dns}), SBX_EGRESS_SOCKET (call/ready: the socket path).
package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const retryPendingEvery = 10 * time.Second

func main() {
	log.SetFlags(0)
	log.SetPrefix("sbx-egress: ")
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "node":
		os.Exit(run(false))
	case "pod":
		os.Exit(run(true))
	case "call":
		os.Exit(call(os.Args[2:]))
	case "ready":
		os.Exit(ready(len(os.Args) > 2 && os.Args[2] == "--wait"))
	case "version":
		fmt.Println(protoVersion)
	default:
		usage()
	}
}

// ready exits 0 once the policy is applied and the API answers. With --wait it polls until then
// (at most a minute): a Kubernetes postStart hook holds the pod's next containers back until it
// returns, without the startupProbe's one-second tick.
func ready(wait bool) int {
	deadline := time.Now().Add(time.Minute)
	for {
		if status, _, err := request("GET", "/v1/health", nil); err == nil && status == 200 {
			return 0
		}
		if !wait || time.Now().After(deadline) {
			return 1
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sbx-egress node | pod | call METHOD /PATH | ready [--wait] | version")
	os.Exit(2)
}

func stateDir() string {
	if d := os.Getenv("SBX_EGRESS_DIR"); d != "" {
		return d
	}
	return "/run/sbx-egress"
}

func nftPath() string {
	if p := os.Getenv("SBX_EGRESS_NFT"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nft"); err == nil {
		return "/usr/sbin/nft"
	}
	return "nft"
}

// blockList parses a comma list of addresses and CIDRs (environment input: strict too).
func blockList(env string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(os.Getenv(env), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := parseBlock(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", env, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func readFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		log.Printf("%s: %v", path, err)
	}
	return string(data)
}

// defaultGateways reads the next hops of the default routes from /proc/net/route (hex, the
// host's byte order) and /proc/net/ipv6_route (hex, network order).
func defaultGateways(route4, route6 string) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, line := range strings.Split(route4, "\n") {
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		f := strings.Fields(line)
		if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		g, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil {
			continue
		}
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], uint32(g))
		add(netip.AddrFrom4(b))
	}
	for _, line := range strings.Split(route6, "\n") {
		// dest destlen src srclen nexthop metric refcnt use flags iface
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != strings.Repeat("0", 32) || f[1] != "00" {
			continue
		}
		b, err := hex.DecodeString(f[4])
		if err != nil || len(b) != 16 {
			continue
		}
		add(netip.AddrFrom16([16]byte(b)))
	}
	return out
}

func run(pod bool) int {
	dnsPort := 15353
	if v := os.Getenv("SBX_EGRESS_DNS_PORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			log.Printf("SBX_EGRESS_DNS_PORT: %q is not a port", v)
			return 1
		}
		dnsPort = n
	}
	var never []netip.Prefix
	for _, env := range []string{"SBX_EGRESS_ALWAYS_DENY", "SBX_EGRESS_HOST_ADDRESSES"} {
		ps, err := blockList(env)
		if err != nil {
			log.Print(err)
			return 1
		}
		never = append(never, ps...)
	}
	if pod {
		// The pod's default gateway is the node's address on the CNI bridge (e.g. 10.244.0.1):
		// the node as much as SBX_EGRESS_HOST_ADDRESSES (its status.hostIP) is.
		gws := defaultGateways(readFile("/proc/net/route"), readFile("/proc/net/ipv6_route"))
		for _, g := range gws {
			never = append(never, netip.PrefixFrom(g, g.BitLen()))
		}
		log.Printf("always denied: the pod's default gateways %v", gws)
	}
	dir := stateDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Print(err)
		return 1
	}
	s := newServer(newNftConfig(pod, never, dnsPort), nftPath(), dir)
	resolv := os.Getenv("SBX_EGRESS_RESOLV_CONF")
	if resolv == "" {
		resolv = "/etc/resolv.conf"
	}
	s.sysUpstreams = resolvConfServers(resolv)

	boxes := s.loadState()
	if pod && len(boxes) == 0 {
		// The pod's spec comes from its manifest; a later PUT (saved in state.json) wins over it
		// when the sidecar restarts. Without a spec the sidecar does not start: the box's
		// containers then never start either (fail closed).
		raw := os.Getenv("SBX_EGRESS_SPEC")
		var body PutBody
		if err := decodeStrictBytes([]byte(raw), &body); err != nil {
			log.Printf("SBX_EGRESS_SPEC: %v", err)
			return 1
		}
		b, err := s.compileBoxInput("self", &body)
		if err != nil {
			log.Printf("SBX_EGRESS_SPEC: %v", err)
			return 1
		}
		boxes = []*box{b}
	}
	if err := s.install(boxes); err != nil {
		log.Printf("installing table %s: %v", table, err)
		return 1
	}
	log.Printf("table %s installed with %d boxes", table, len(s.boxes))
	// Boxes the kernel refused at the start are retried until they are in force (or PUT or
	// DELETEd again); /v1/health is 503 until then.
	go func() {
		for s.retryPending() {
			time.Sleep(retryPendingEvery)
		}
	}()

	p := newProxy(s, pod)
	var closers []func()
	if pod {
		c, err := p.listen(fmt.Sprintf("127.0.0.1:%d", dnsPort))
		if err != nil {
			log.Printf("dns: %v", err)
			return 1
		}
		closers = append(closers, c)
		if c, err := p.listen(fmt.Sprintf("[::1]:%d", dnsPort)); err == nil {
			closers = append(closers, c)
		}
	} else {
		c, err := p.listen(fmt.Sprintf(":%d", dnsPort))
		if err != nil {
			log.Printf("dns: %v", err)
			return 1
		}
		closers = append(closers, c)
	}
	srv, err := s.serveAPI(filepath.Join(dir, "egress.sock"))
	if err != nil {
		log.Printf("api: %v", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	// The table stays: boxes keep their policy while the helper is away (a restart rebuilds it).
	srv.Close()
	for _, c := range closers {
		c()
	}
	return 0
}
