package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Everything this file writes into nft text is built from typed values (netip.Prefix/Addr,
// integers, fixed keywords, hex digests): no caller-supplied string ever reaches nft, so there
// is nothing to escape and nothing to inject. A box id becomes a digest (boxTag).

const (
	table      = "inet sbx_egress"
	boxIfaces  = "sbx-boxes*" // the engine's box bridges (src/runtime/docker/box-network.ts)
	dnsMark    = 0x5b5b       // pod mode: the proxy's own upstream sockets (SO_MARK)
	rejectName = "reject_box"
	// maxBoxElements bounds the set elements one box compiles to. Overlapping address blocks
	// with ports multiply (each piece of a block gets every port range that covers it): 1000
	// valid entries could otherwise make tens of millions of elements, gigabytes of nft text
	// and a minute of CPU under the server's lock, which stalls every box's PUT and DNS. And the
	// kernel loads concatenated interval sets (address . protocol . ports) in about quadratic
	// time, under its nftables commit lock: 3,280 elements took 1.1 s here, 62,952 took 186 s.
	// 4096 keeps one change near a second at worst; a 1000-entry policy of names and addresses,
	// with or without ports, stays far below it (a name compiles to no element, an address to one).
	maxBoxElements = 4096
	// learnSetSize: the kernel's own bound on a learned set, behind the box's maxLearned (twice
	// that: expired elements count until the kernel's garbage collection removes them).
	learnSetSize = 2 * maxLearned
)

var (
	// Link-local (cloud metadata lives there) and AWS's IPv6 metadata address: always denied.
	baseNever = []string{"169.254.0.0/16", "fd00:ec2::254/128"}
	// Denied to an allowlist unless an allow rule names an address block inside them.
	privateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fe80::/10"}
)

// nftConfig is what does not change per box.
type nftConfig struct {
	pod     bool           // output hook in the box's own netns, else forward hook on the node
	never   []netip.Prefix // always denied: baseNever plus SBX_EGRESS_ALWAYS_DENY / SBX_EGRESS_HOST_ADDRESSES
	private []netip.Prefix
	dnsPort int
}

func newNftConfig(pod bool, extraNever []netip.Prefix, dnsPort int) *nftConfig {
	c := &nftConfig{pod: pod, dnsPort: dnsPort}
	for _, s := range baseNever {
		c.never = append(c.never, netip.MustParsePrefix(s))
	}
	c.never = append(c.never, extraNever...)
	for _, s := range privateRanges {
		c.private = append(c.private, netip.MustParsePrefix(s))
	}
	return c
}

// boxTag names a box's chain and sets: ids may hold characters nft names cannot.
func boxTag(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "b" + hex.EncodeToString(sum[:8])
}

// boxRules is a box's compiled chain: the sets to create (name -> declaration) and the rules.
type boxRules struct {
	sets  []nftSet
	rules []string
	// Learned (DNS) sets per class, by family: allow and port-scoped deny.
	learnAllow []learnSet
	learnDeny  []learnSet
}

type nftSet struct {
	name string
	decl string // "type …; flags …;" and the elements
}

type learnSet struct {
	class class
	name4 string
	name6 string
}

func portMatch(c class) string {
	if !c.hasPorts {
		return ""
	}
	ports := fmt.Sprint(c.lo)
	if c.hi != c.lo {
		ports = fmt.Sprintf("%d-%d", c.lo, c.hi)
	}
	if c.proto == "" {
		return " meta l4proto { tcp, udp } th dport " + ports
	}
	return fmt.Sprintf(" meta l4proto %s th dport %s", c.proto, ports)
}

// compileBox builds a box's chain in the check order of types.ts's EgressSpec: endpoints accept;
// deny reject (address blocks, and addresses DNS gave for names denied with ports); allow address
// blocks that lie inside an always-denied range (the rule names them explicitly) accept; the
// always denied reject; allow blocks inside a private range (allowlist) accept; the private ranges
// reject; the other allow address blocks accept; DNS-learned accept; final verdict.
// Splitting the allow blocks keeps `allow 0.0.0.0/0` from opening metadata or other boxes: only a
// block within a denied range names it. A block named by a private range only comes after the
// always-denied rejects: `allow 10.0.0.0/8` opens 10/8 but not the node's 10.0.0.5 in it (which
// only `allow 10.0.0.5/32` names). Outside the denied ranges the positions are equivalent.
func compileBox(cfg *nftConfig, tag string, p *policy) (*boxRules, error) {
	br := &boxRules{}
	left := maxBoxElements
	over := false
	addBlocks := func(cat string, rs []rule, verdict string) {
		if over {
			return
		}
		plain := map[int][]netip.Prefix{}
		ported := map[int][]portBlock{}
		for _, r := range rs {
			if r.isDomain() {
				continue
			}
			fam := famOf(r.prefix)
			if !r.hasPorts {
				plain[fam] = append(plain[fam], r.prefix)
				continue
			}
			for _, proto := range protos(r.proto) {
				ported[fam] = append(ported[fam], portBlock{r.prefix, proto, r.lo, r.hi})
			}
		}
		for _, fam := range []int{4, 6} {
			if len(ported[fam]) > 0 {
				name := fmt.Sprintf("%s_%s_p%d", tag, cat, fam)
				blocks, ok := disjoint(ported[fam], &left)
				if !ok {
					over = true
					return
				}
				var els []string
				for _, b := range blocks {
					els = append(els, b.String())
				}
				br.sets = append(br.sets, nftSet{name, fmt.Sprintf("type %s . inet_proto . inet_service; flags interval; elements = { %s }", addrType(fam), strings.Join(els, ", "))})
				br.rules = append(br.rules, fmt.Sprintf("%s daddr . meta l4proto . th dport @%s %s", ipKw(fam), name, verdict))
			}
			if len(plain[fam]) > 0 {
				if left -= len(plain[fam]); left < 0 {
					over = true
					return
				}
				name := fmt.Sprintf("%s_%s_a%d", tag, cat, fam)
				br.sets = append(br.sets, nftSet{name, fmt.Sprintf("type %s; flags interval; auto-merge; elements = { %s }", addrType(fam), joinPrefixes(plain[fam]))})
				br.rules = append(br.rules, fmt.Sprintf("%s daddr @%s %s", ipKw(fam), name, verdict))
			}
		}
	}
	reject := "goto " + rejectName
	var named, namedPrivate, broad []rule
	for _, r := range p.allow {
		switch {
		case !r.isDomain() && withinAny(r.prefix, cfg.never):
			named = append(named, r)
		case !r.isDomain() && p.mode == "allowlist" && withinAny(r.prefix, cfg.private):
			namedPrivate = append(namedPrivate, r)
		default:
			broad = append(broad, r)
		}
	}

	addBlocks("ep", p.endpoints, "accept")
	addBlocks("dn", p.deny, reject)
	br.learnDeny = learnSets(tag, "ld", p.deny, func(r rule) bool { return r.hasPorts })
	for _, ls := range br.learnDeny {
		br.rules = append(br.rules, learnRules(ls, reject)...)
	}
	// A named block opens the always-denied range it lies in, not a narrower always-denied block
	// inside it (allow 10.244.1.0/24 in the pod network must not open the node's 10.244.1.1),
	// unless an allow entry lies inside that one too.
	var innerNever []rule
	for _, n := range cfg.never {
		for _, a := range named {
			if a.prefix.Bits() < n.Bits() && withinAny(n, []netip.Prefix{a.prefix}) && !namesWithin(named, n) {
				innerNever = append(innerNever, rule{prefix: n})
				break
			}
		}
	}
	addBlocks("ni", innerNever, reject)
	addBlocks("an", named, "accept")
	br.rules = append(br.rules, "ip daddr @never4 "+reject, "ip6 daddr @never6 "+reject)
	if !cfg.pod {
		// Other boxes: anything routed back out to a box bridge.
		br.rules = append(br.rules, fmt.Sprintf("oifname %q %s", boxIfaces, reject))
	}
	addBlocks("ap", namedPrivate, "accept")
	if p.mode == "allowlist" {
		br.rules = append(br.rules, "ip daddr @private4 "+reject, "ip6 daddr @private6 "+reject)
	}
	addBlocks("al", broad, "accept")
	br.learnAllow = learnSets(tag, "la", p.allow, func(rule) bool { return true })
	for _, ls := range br.learnAllow {
		br.rules = append(br.rules, learnRules(ls, "accept")...)
	}
	if p.mode == "all" || p.mode == "denylist" {
		br.rules = append(br.rules, "accept")
	} else {
		br.rules = append(br.rules, reject)
	}
	for _, ls := range append(append([]learnSet{}, br.learnDeny...), br.learnAllow...) {
		br.sets = append(br.sets,
			nftSet{ls.name4, fmt.Sprintf("type ipv4_addr; flags timeout; size %d", learnSetSize)},
			nftSet{ls.name6, fmt.Sprintf("type ipv6_addr; flags timeout; size %d", learnSetSize)})
	}
	if over {
		return nil, fmt.Errorf("spec: the policy compiles to more than %d set elements (the limit of one box); use fewer overlapping address blocks with ports", maxBoxElements)
	}
	return br, nil
}

// learnSets: one pair of timeout sets per distinct class of the domain rules that pass keep.
func learnSets(tag, cat string, rs []rule, keep func(rule) bool) []learnSet {
	var out []learnSet
	seen := map[class]bool{}
	for _, r := range rs {
		if !r.isDomain() || !keep(r) || seen[r.class()] {
			continue
		}
		seen[r.class()] = true
		k := len(out)
		out = append(out, learnSet{class: r.class(), name4: fmt.Sprintf("%s_%s4_%d", tag, cat, k), name6: fmt.Sprintf("%s_%s6_%d", tag, cat, k)})
	}
	return out
}

func learnRules(ls learnSet, verdict string) []string {
	pm := portMatch(ls.class)
	return []string{
		fmt.Sprintf("ip daddr @%s%s %s", ls.name4, pm, verdict),
		fmt.Sprintf("ip6 daddr @%s%s %s", ls.name6, pm, verdict),
	}
}

// namesWithin: some of the rules' blocks lie inside n (n itself included).
func namesWithin(rs []rule, n netip.Prefix) bool {
	for _, r := range rs {
		if withinAny(r.prefix, []netip.Prefix{n}) {
			return true
		}
	}
	return false
}

func withinAny(p netip.Prefix, ranges []netip.Prefix) bool {
	for _, r := range ranges {
		if r.Addr().BitLen() == p.Addr().BitLen() && r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func famOf(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

func addrType(fam int) string {
	if fam == 4 {
		return "ipv4_addr"
	}
	return "ipv6_addr"
}

func ipKw(fam int) string {
	if fam == 4 {
		return "ip"
	}
	return "ip6"
}

func protos(p string) []string {
	if p == "" {
		return []string{"tcp", "udp"}
	}
	return []string{p}
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// portBlock is an allow/deny block with ports, the input of disjoint.
type portBlock struct {
	prefix netip.Prefix
	proto  string
	lo, hi uint16
}

// rangeBlock is one element of a concatenated `addr . proto . port` interval set: an address
// range (nft takes `a-b` there as well as prefixes).
type rangeBlock struct {
	from, to netip.Addr
	proto    string
	lo, hi   uint16
}

func (b rangeBlock) String() string {
	addrs := b.from.String()
	if b.to != b.from {
		addrs += "-" + b.to.String()
	}
	ports := fmt.Sprint(b.lo)
	if b.hi != b.lo {
		ports = fmt.Sprintf("%d-%d", b.lo, b.hi)
	}
	return fmt.Sprintf("%s . %s . %s", addrs, b.proto, ports)
}

// disjoint rewrites blocks of one family so that no two elements overlap: the kernel's
// concatenated interval sets (pipapo) refuse overlapping elements with EEXIST and nft 1.0.6 has
// no auto-merge for them. Address blocks nest or are disjoint, so they form a tree; every address
// gets the union of the port ranges of the blocks around it (eff), and a walk in address order
// emits each stretch of addresses with the same eff as one address range: a block minus the
// blocks nested in it costs one range per gap, not one prefix per bit of each hole (which made
// 29 M elements of 1000 entries). left is the element budget: disjoint stops and returns false
// as soon as the output would pass it, so the work is bounded by the budget too.
func disjoint(in []portBlock, left *int) ([]rangeBlock, bool) {
	var out []rangeBlock
	byProto := map[string][]portBlock{}
	for _, b := range in {
		byProto[b.proto] = append(byProto[b.proto], b)
	}
	for _, proto := range []string{"tcp", "udp"} {
		bs := byProto[proto]
		if len(bs) == 0 {
			continue
		}
		ports := map[netip.Prefix][][2]uint16{}
		var prefixes []netip.Prefix
		for _, b := range bs {
			if _, ok := ports[b.prefix]; !ok {
				prefixes = append(prefixes, b.prefix)
			}
			ports[b.prefix] = append(ports[b.prefix], [2]uint16{b.lo, b.hi})
		}
		// Address order, outer blocks before the blocks they hold: a depth-first order of the tree.
		sort.Slice(prefixes, func(i, j int) bool {
			if c := prefixes[i].Addr().Compare(prefixes[j].Addr()); c != 0 {
				return c < 0
			}
			return prefixes[i].Bits() < prefixes[j].Bits()
		})
		eff := map[netip.Prefix][][2]uint16{}
		kids := map[netip.Prefix][]netip.Prefix{}
		var roots, stack []netip.Prefix
		for _, p := range prefixes {
			for len(stack) > 0 && !stack[len(stack)-1].Contains(p.Addr()) {
				stack = stack[:len(stack)-1]
			}
			own := append([][2]uint16{}, ports[p]...)
			if len(stack) == 0 {
				roots = append(roots, p)
			} else {
				parent := stack[len(stack)-1]
				kids[parent] = append(kids[parent], p)
				own = append(own, eff[parent]...)
			}
			eff[p] = mergeRanges(own)
			stack = append(stack, p)
		}
		run := -1 // where the last stretch's elements start in out
		emit := func(from, to netip.Addr, rs [][2]uint16) bool {
			// A stretch right after one with the same ports extends it (a nested block that adds
			// no port costs nothing).
			if run >= 0 && out[run].to.Next() == from && sameRun(out[run:], rs) {
				for i := run; i < len(out); i++ {
					out[i].to = to
				}
				return true
			}
			if *left -= len(rs); *left < 0 {
				return false
			}
			run = len(out)
			for _, r := range rs {
				out = append(out, rangeBlock{from, to, proto, r[0], r[1]})
			}
			return true
		}
		var walk func(p netip.Prefix) bool
		walk = func(p netip.Prefix) bool {
			cur, end := p.Addr(), lastAddr(p)
			for _, k := range kids[p] {
				if cur.Less(k.Addr()) && !emit(cur, k.Addr().Prev(), eff[p]) {
					return false
				}
				if !walk(k) {
					return false
				}
				if cur = lastAddr(k).Next(); !cur.IsValid() {
					return true // k ends at the last address of the family
				}
			}
			if !end.Less(cur) {
				return emit(cur, end, eff[p])
			}
			return true
		}
		for _, r := range roots {
			if !walk(r) {
				return nil, false
			}
		}
	}
	return out, true
}

// sameRun: the elements of one stretch of addresses carry exactly the port ranges rs.
func sameRun(run []rangeBlock, rs [][2]uint16) bool {
	if len(run) != len(rs) {
		return false
	}
	for i, r := range rs {
		if run[i].lo != r[0] || run[i].hi != r[1] {
			return false
		}
	}
	return true
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func mergeRanges(rs [][2]uint16) [][2]uint16 {
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	var out [][2]uint16
	for _, r := range rs {
		if n := len(out); n > 0 && uint32(r[0]) <= uint32(out[n-1][1])+1 {
			if r[1] > out[n-1][1] {
				out[n-1][1] = r[1]
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// baseTableText rebuilds the whole table in one transaction (`add; delete; table {…}`): at start
// and on recovery, nothing of an earlier run or an earlier version survives, and packets see the
// old table until the new one is complete.
func baseTableText(cfg *nftConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s\ndelete table %s\ntable %s {\n", table, table, table)
	var n4, n6, p4, p6 []netip.Prefix
	for _, p := range cfg.never {
		if famOf(p) == 4 {
			n4 = append(n4, p)
		} else {
			n6 = append(n6, p)
		}
	}
	for _, p := range cfg.private {
		if famOf(p) == 4 {
			p4 = append(p4, p)
		} else {
			p6 = append(p6, p)
		}
	}
	for _, s := range []struct {
		name string
		fam  int
		els  []netip.Prefix
	}{{"never4", 4, n4}, {"never6", 6, n6}, {"private4", 4, p4}, {"private6", 6, p6}} {
		fmt.Fprintf(&b, "\tset %s { type %s; flags interval; auto-merge;", s.name, addrType(s.fam))
		if len(s.els) > 0 {
			fmt.Fprintf(&b, " elements = { %s };", joinPrefixes(s.els))
		}
		b.WriteString(" }\n")
	}
	fmt.Fprintf(&b, "\tchain %s {\n\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx admin-prohibited\n\t}\n", rejectName)
	if cfg.pod {
		// The box's own netns: everything it sends passes output. Loopback stays open: the
		// redirected DNS goes there, and output's oif is the route before the nat redirect, hence
		// the 127.0.0.0/8 and ::1 rules beside `oifname "lo"`. Replies to inbound connections pass, the proxy's marked
		// upstream queries pass and are not redirected. Neighbor discovery passes: the default
		// gateway (often link-local fe80::…) is always denied, and its unicast neighbor probes
		// must still go out or IPv6 to everywhere else breaks.
		fmt.Fprintf(&b, "\tchain box {\n\t\treject with icmpx admin-prohibited\n\t}\n")
		fmt.Fprintf(&b, "\tchain dnsredirect {\n\t\ttype nat hook output priority -105; policy accept;\n"+
			"\t\tmeta mark 0x%x return\n"+
			"\t\tmeta l4proto { tcp, udp } th dport 53 redirect to :%d\n\t}\n", dnsMark, cfg.dnsPort)
		fmt.Fprintf(&b, "\tchain egress {\n\t\ttype filter hook output priority filter - 5; policy accept;\n"+
			"\t\toifname \"lo\" accept\n\t\tip daddr 127.0.0.0/8 accept\n\t\tip6 daddr ::1 accept\n"+
			"\t\tct direction reply accept\n\t\tmeta mark 0x%x accept\n"+
			"\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n"+
			"\t\tjump box\n\t}\n", dnsMark)
	} else {
		b.WriteString("\tmap box4 { type ipv4_addr : verdict; }\n\tmap box6 { type ipv6_addr : verdict; }\n")
		b.WriteString("\tset dns4 { type ipv4_addr; }\n\tset dns6 { type ipv6_addr; }\n")
		fmt.Fprintf(&b, "\tchain dnsredirect {\n\t\ttype nat hook prerouting priority dstnat - 5; policy accept;\n"+
			"\t\tiifname %q ip saddr @dns4 meta l4proto { tcp, udp } th dport 53 redirect to :%d\n"+
			"\t\tiifname %q ip6 saddr @dns6 meta l4proto { tcp, udp } th dport 53 redirect to :%d\n\t}\n",
			boxIfaces, cfg.dnsPort, boxIfaces, cfg.dnsPort)
		// The proxy listens on every host address (a box's redirected DNS arrives for whatever
		// address it asked); only redirected queries may reach it, not the host's other networks.
		fmt.Fprintf(&b, "\tchain dnsguard {\n\t\ttype filter hook input priority filter - 5; policy accept;\n"+
			"\t\tmeta l4proto { tcp, udp } th dport %d ct status dnat accept\n"+
			"\t\tmeta l4proto { tcp, udp } th dport %d drop\n\t}\n", cfg.dnsPort, cfg.dnsPort)
		// No `ct state established accept` for the original direction: every packet of a box is
		// checked, so a policy change cuts connections already open (TCP gets a reset).
		fmt.Fprintf(&b, "\tchain egress {\n\t\ttype filter hook forward priority filter - 5; policy accept;\n"+
			"\t\tct direction reply accept\n\t\tip saddr vmap @box4\n\t\tip6 saddr vmap @box6\n"+
			"\t\tiifname %q drop\n\t}\n", boxIfaces)
	}
	b.WriteString("}\n")
	return b.String()
}

// chainName: the box's chain (pod mode has the one fixed chain `box` that egress jumps to).
func chainName(cfg *nftConfig, tag string) string {
	if cfg.pod {
		return "box"
	}
	return tag
}

// addBoxText creates a box's sets and fills its chain (the chain exists and is empty).
func addBoxText(cfg *nftConfig, tag string, br *boxRules) string {
	var b strings.Builder
	for _, s := range br.sets {
		fmt.Fprintf(&b, "add set %s %s { %s; }\n", table, s.name, s.decl)
	}
	for _, r := range br.rules {
		fmt.Fprintf(&b, "add rule %s %s %s\n", table, chainName(cfg, tag), r)
	}
	return b.String()
}

// clearBoxText empties a box's chain and deletes its sets (rules go first: they hold the sets).
func clearBoxText(cfg *nftConfig, tag string, br *boxRules) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flush chain %s %s\n", table, chainName(cfg, tag))
	for _, s := range br.sets {
		fmt.Fprintf(&b, "delete set %s %s\n", table, s.name)
	}
	return b.String()
}

// addrElems writes the verdict-map and DNS-redirect elements of a node box's addresses.
func addrElems(op, tag string, addrs []netip.Addr, dns bool) string {
	var b strings.Builder
	for _, a := range addrs {
		fam := 6
		if a.Is4() {
			fam = 4
		}
		if op == "add" {
			fmt.Fprintf(&b, "add element %s box%d { %s : jump %s }\n", table, fam, a, tag)
		} else {
			fmt.Fprintf(&b, "delete element %s box%d { %s }\n", table, fam, a)
		}
		if dns {
			fmt.Fprintf(&b, "%s element %s dns%d { %s }\n", op, table, fam, a)
		}
	}
	return b.String()
}

// learnText adds addresses to learned sets with a timeout. An element already there keeps its
// old timeout on `add`, so each is added (a no-op when present), deleted and added again in the
// same transaction: the timeout is refreshed and a missing element never fails the batch.
func learnText(set string, a netip.Addr, ttl time.Duration) string {
	secs := int(ttl / time.Second)
	return fmt.Sprintf("add element %s %s { %s }\ndelete element %s %s { %s }\nadd element %s %s { %s timeout %ds }\n",
		table, set, a, table, set, a, table, set, a, secs)
}

// runNft runs one `nft -f -` batch: the kernel applies it as one transaction or not at all.
func runNft(nftPath, text string) error {
	cmd := exec.Command(nftPath, "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 2000 {
			msg = msg[:2000] + "…"
		}
		return fmt.Errorf("nft: %v: %s", err, msg)
	}
	return nil
}
