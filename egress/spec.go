package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// The wire form of src/runtime/types.ts's EgressTarget and EgressSpec (their doc comments define
// the check order this program enforces).
type Target struct {
	Host     string  `json:"host"`
	Ports    *[2]int `json:"ports,omitempty"`
	Protocol string  `json:"protocol,omitempty"`
}

type Spec struct {
	Mode      string   `json:"mode"`
	Allow     []Target `json:"allow"`
	Deny      []Target `json:"deny"`
	Endpoints []Target `json:"endpoints"`
}

// PutBody is the body of PUT /v1/boxes/{id} (and, as {spec, dns}, of SBX_EGRESS_SPEC in pod mode).
type PutBody struct {
	Addresses []string `json:"addresses"`
	Spec      *Spec    `json:"spec"`
	DNS       []string `json:"dns"`
	// MACs (node mode, optional): the box's interface MAC addresses. When given, a packet with
	// one of the box's source addresses but another source MAC is dropped: without NET_ADMIN a box
	// cannot change its MAC, but an unprivileged process can send IPv6 from a foreign source
	// address (IPV6_FREEBIND), and would otherwise be checked against another box's policy.
	MACs []string `json:"macs,omitempty"`
}

// Bounds on what a caller may register: sbx allows 1000 user entries, plus a few endpoints.
const (
	maxTargets   = 4096
	maxAddresses = 16
	maxUpstreams = 8
	maxDomainLen = 253
)

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

func validID(id string) bool { return idPattern.MatchString(id) }

// rule is a validated target. Exactly one of prefix (an address block) or domain is set; a
// domain rule with wildcard matches every name strictly below domain.
type rule struct {
	prefix   netip.Prefix
	domain   string
	wildcard bool
	hasPorts bool
	lo, hi   uint16
	proto    string // "", "tcp" or "udp"; "" with ports means both
}

func (r rule) isDomain() bool { return r.domain != "" }

// class is what a rule matches beyond the address: its ports and protocol. DNS-learned addresses
// are kept in one set per class (see nft.go).
type class struct {
	hasPorts bool
	lo, hi   uint16
	proto    string
}

func (r rule) class() class { return class{r.hasPorts, r.lo, r.hi, r.proto} }

// policy is a validated Spec.
type policy struct {
	mode      string
	allow     []rule
	deny      []rule
	endpoints []rule
}

// needsDNS: the box's DNS goes through the proxy when names decide anything: allowlist and none
// answer only allowed names, and any domain rule needs the proxy to learn addresses.
func (p *policy) needsDNS() bool {
	if p.mode == "allowlist" || p.mode == "none" {
		return true
	}
	for _, r := range append(append([]rule{}, p.allow...), p.deny...) {
		if r.isDomain() {
			return true
		}
	}
	return false
}

// decodeStrict decodes exactly one JSON value with no unknown fields and nothing after it.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("bad JSON: data after the value")
	}
	return nil
}

func decodeStrictBytes(b []byte, v any) error { return decodeStrict(bytes.NewReader(b), v) }

func compileSpec(s *Spec) (*policy, error) {
	if s == nil {
		return nil, errors.New("spec is required")
	}
	switch s.Mode {
	case "all", "none", "allowlist", "denylist":
	default:
		return nil, fmt.Errorf("spec.mode must be all, none, allowlist or denylist, not %q", s.Mode)
	}
	if len(s.Allow)+len(s.Deny)+len(s.Endpoints) > maxTargets {
		return nil, fmt.Errorf("at most %d targets", maxTargets)
	}
	p := &policy{mode: s.Mode}
	var err error
	if p.allow, err = compileTargets("spec.allow", s.Allow, true); err != nil {
		return nil, err
	}
	if p.deny, err = compileTargets("spec.deny", s.Deny, true); err != nil {
		return nil, err
	}
	if p.endpoints, err = compileTargets("spec.endpoints", s.Endpoints, false); err != nil {
		return nil, err
	}
	return p, nil
}

func compileTargets(field string, ts []Target, domains bool) ([]rule, error) {
	out := make([]rule, 0, len(ts))
	for i, t := range ts {
		r, err := compileTarget(t, domains)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", field, i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func compileTarget(t Target, domains bool) (rule, error) {
	var r rule
	switch t.Protocol {
	case "", "tcp", "udp":
		r.proto = t.Protocol
	default:
		return r, fmt.Errorf("protocol must be tcp or udp, not %q", t.Protocol)
	}
	if t.Ports != nil {
		lo, hi := t.Ports[0], t.Ports[1]
		if lo < 1 || hi > 65535 || lo > hi {
			return r, fmt.Errorf("ports [%d, %d]: each 1-65535, low <= high", lo, hi)
		}
		r.hasPorts, r.lo, r.hi = true, uint16(lo), uint16(hi)
	} else if r.proto != "" {
		return r, errors.New("a protocol needs ports")
	}
	if p, err := parseBlock(t.Host); err == nil {
		r.prefix = p
		return r, nil
	} else if strings.ContainsAny(t.Host, ":/") || looksNumeric(t.Host) {
		return r, err
	}
	if !domains {
		return r, fmt.Errorf("host %q: an address block is required here", t.Host)
	}
	name, wildcard, err := parseDomain(t.Host)
	if err != nil {
		return r, err
	}
	r.domain, r.wildcard = name, wildcard
	return r, nil
}

// looksNumeric: a host of digits and dots is an (invalid) address, not a domain.
func looksNumeric(h string) bool {
	if h == "" {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// parseBlock takes a CIDR (or a bare address, as a /32 or /128) without host bits and returns it
// in the form nft and Go agree on. IPv4-mapped IPv6 and zones are refused: they would never match.
func parseBlock(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("host %q: not a CIDR", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("host %q: not an address", s)
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("host %q: no zones", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("host %q: IPv4-mapped IPv6; write the IPv4 form", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("host %q: host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// parseDomain: lowercase ASCII (IDNA already punycode), optional trailing dot, `*` only as the
// whole first label; labels of [a-z0-9-], 1-63 chars, no leading or trailing hyphen.
func parseDomain(s string) (string, bool, error) {
	name := strings.TrimSuffix(asciiLower(s), ".")
	wildcard := false
	if strings.HasPrefix(name, "*.") {
		wildcard, name = true, name[2:]
	}
	if name == "" || len(name) > maxDomainLen {
		return "", false, fmt.Errorf("host %q: not a domain (1-%d characters)", s, maxDomainLen)
	}
	for _, label := range strings.Split(name, ".") {
		if !validLabel(label) {
			return "", false, fmt.Errorf("host %q: not a domain (label %q)", s, label)
		}
	}
	return name, wildcard, nil
}

func validLabel(l string) bool {
	if len(l) < 1 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// normalizeName: how a name from a DNS message is compared: ASCII lowercase, no trailing dot.
func normalizeName(n string) string { return strings.TrimSuffix(asciiLower(n), ".") }

// asciiLower lowercases A-Z only. DNS compares names case-insensitively in ASCII alone;
// strings.ToLower maps e.g. KELVIN SIGN (U+212A) to k, so `o\u212a.test` would be judged as
// ok.test while the upstream resolves another name.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// plainName: every byte of a query name is a letter, digit, hyphen, underscore or dot. Anything
// else cannot match a rule (rules are [a-z0-9-]) and is answered NXDOMAIN, never forwarded.
func plainName(n string) bool {
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// matches: exact, or for `*.d` every name strictly below d. name is normalized.
func (r rule) matches(name string) bool {
	if !r.isDomain() {
		return false
	}
	if r.wildcard {
		return len(name) > len(r.domain)+1 && strings.HasSuffix(name, r.domain) && name[len(name)-len(r.domain)-1] == '.'
	}
	return name == r.domain
}

func parseMACs(ss []string) ([]string, error) {
	if len(ss) > maxAddresses {
		return nil, fmt.Errorf("at most %d macs", maxAddresses)
	}
	out := make([]string, 0, len(ss))
	for i, s := range ss {
		m, err := net.ParseMAC(s)
		if err != nil || len(m) != 6 {
			return nil, fmt.Errorf("macs[%d]: %q is not an Ethernet MAC address", i, s)
		}
		out = append(out, m.String())
	}
	return out, nil
}

func parseAddresses(ss []string) ([]netip.Addr, error) {
	if len(ss) > maxAddresses {
		return nil, fmt.Errorf("at most %d addresses", maxAddresses)
	}
	out := make([]netip.Addr, 0, len(ss))
	seen := map[netip.Addr]bool{}
	for i, s := range ss {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() || a.IsUnspecified() {
			return nil, fmt.Errorf("addresses[%d]: %q is not a unicast address", i, s)
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// parseUpstreams takes `ip`, `ip:port` or `[ip6]:port`.
func parseUpstreams(ss []string) ([]netip.AddrPort, error) {
	if len(ss) > maxUpstreams {
		return nil, fmt.Errorf("at most %d dns servers", maxUpstreams)
	}
	out := make([]netip.AddrPort, 0, len(ss))
	for i, s := range ss {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, err2 := netip.ParseAddr(s)
			if err2 != nil {
				return nil, fmt.Errorf("dns[%d]: %q is not an address or address:port", i, s)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		if ap.Port() == 0 || ap.Addr().Zone() != "" || ap.Addr().IsUnspecified() {
			return nil, fmt.Errorf("dns[%d]: %q is not a usable server", i, s)
		}
		out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	return out, nil
}
