package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// box is one registered box: what the caller sent (kept verbatim for GET and state.json) and
// what was compiled from it.
type box struct {
	id        string
	addrs     []netip.Addr
	spec      Spec
	specKey   string
	dnsRaw    []string
	macs      []string // canonical (net.HardwareAddr.String), so safe in nft text
	upstreams []netip.AddrPort
	pol       *policy
	tag       string
	rules     *boxRules
	gen       uint64 // changes whenever the box's sets are rebuilt
	// learned: when each element put in the learned sets expires (set name + address). A
	// repeated answer refreshes the kernel's element only once half its lifetime is gone, so a
	// hot name costs no nft run per query.
	learned map[string]time.Time
	answers map[string]answer // by queried name
}

func (b *box) view() boxView {
	return boxView{ID: b.id, Addresses: b.addrStrings(), Spec: b.spec, DNS: b.dnsRaw, MACs: b.macs}
}

func (b *box) addrStrings() []string {
	out := make([]string, len(b.addrs))
	for i, a := range b.addrs {
		out[i] = a.String()
	}
	return out
}

// server holds the registered boxes; mu serializes every nft transaction and the state that
// mirrors what the kernel holds.
type server struct {
	mu           sync.Mutex
	cfg          *nftConfig
	nft          string
	dir          string
	boxes        map[string]*box
	byAddr       map[netip.Addr]*box
	gen          uint64
	sysUpstreams []netip.AddrPort
	// pending: state.json entries the start could not install (the kernel refused them). They
	// stay in state.json (saveLocked writes them back) until installed (retryPending), PUT or
	// DELETEd again, and /v1/health answers 503 naming them meanwhile: callers see it, and do not
	// re-register those boxes from older data while the helper still holds their last policy.
	pending    map[string]*box
	pendingErr error
}

func newServer(cfg *nftConfig, nftPath, dir string) *server {
	return &server{cfg: cfg, nft: nftPath, dir: dir, boxes: map[string]*box{}, byAddr: map[netip.Addr]*box{}}
}

type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &httpError{400, fmt.Sprintf(format, a...)}
}

// compileBoxInput validates a PUT body into a box (not yet registered).
func (s *server) compileBoxInput(id string, body *PutBody) (*box, error) {
	if !validID(id) {
		return nil, badRequest("box id must match [a-zA-Z0-9_.-]{1,128}")
	}
	if s.cfg.pod && id != "self" {
		return nil, &httpError{404, "pod mode has the one box \"self\""}
	}
	addrs, err := parseAddresses(body.Addresses)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	// No addresses is allowed: a box whose address moved to another keeps its policy and matches
	// nothing until it is given one again.
	pol, err := compileSpec(body.Spec)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	ups, err := parseUpstreams(body.DNS)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	macs, err := parseMACs(body.MACs)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	if s.cfg.pod {
		macs = nil
	}
	key, _ := json.Marshal([]any{body.Spec, macs})
	b := &box{id: id, addrs: addrs, spec: *body.Spec, specKey: string(key), dnsRaw: body.DNS, upstreams: ups, pol: pol, tag: boxTag(id), macs: macs}
	if b.dnsRaw == nil {
		b.dnsRaw = []string{}
	}
	if b.rules, err = compileBox(s.cfg, b.tag, pol); err != nil {
		return nil, badRequest("%v", err)
	}
	if len(macs) > 0 {
		b.rules.rules = append([]string{fmt.Sprintf("ether saddr != { %s } drop", strings.Join(macs, ", "))}, b.rules.rules...)
	}
	return b, nil
}

// put registers or replaces a box in one nft transaction and returns once it committed.
func (s *server) put(b *box) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var text strings.Builder
	old := s.boxes[b.id]
	dns := b.pol.needsDNS() && !s.cfg.pod
	// Addresses another box holds move here: an engine reuses a removed box's address.
	moved := map[*box][]netip.Addr{}
	for _, a := range b.addrs {
		if o := s.byAddr[a]; o != nil && o.id != b.id {
			text.WriteString(addrElems("delete", o.tag, []netip.Addr{a}, o.pol.needsDNS()))
			moved[o] = append(moved[o], a)
		}
	}
	sameRules := old != nil && old.specKey == b.specKey
	now := time.Now()
	var carried []learnedEntry
	carry := func() {
		t, f, answers := carryText(old, b, now)
		text.WriteString(t)
		carried, b.answers = f, answers
	}
	switch {
	case s.cfg.pod:
		if old != nil {
			text.WriteString(clearBoxText(s.cfg, old.tag, old.rules))
		} else {
			fmt.Fprintf(&text, "flush chain %s box\n", table)
		}
		text.WriteString(addBoxText(s.cfg, b.tag, b.rules))
		if old != nil {
			carry()
		}
	case sameRules:
		// Only the addresses change; the sets (and what DNS taught them) stay.
		text.WriteString(addrElems("delete", old.tag, minus(old.addrs, b.addrs), dns))
		text.WriteString(addrElems("add", b.tag, minus(b.addrs, old.addrs), dns))
	case old != nil:
		text.WriteString(addrElems("delete", old.tag, old.addrs, old.pol.needsDNS()))
		text.WriteString(clearBoxText(s.cfg, old.tag, old.rules))
		text.WriteString(addBoxText(s.cfg, b.tag, b.rules))
		carry()
		text.WriteString(addrElems("add", b.tag, b.addrs, dns))
	default:
		fmt.Fprintf(&text, "add chain %s %s\n", table, b.tag)
		text.WriteString(addBoxText(s.cfg, b.tag, b.rules))
		text.WriteString(addrElems("add", b.tag, b.addrs, dns))
	}
	if err := runNft(s.nft, text.String()); err != nil {
		return err
	}
	for o, as := range moved {
		o.addrs = minus(o.addrs, as)
	}
	if old != nil {
		for _, a := range old.addrs {
			delete(s.byAddr, a)
		}
	}
	if sameRules {
		b.rules, b.learned, b.answers = old.rules, old.learned, old.answers
	} else {
		b.remember(carried, now)
	}
	s.registerLocked(b, sameRules, old)
	delete(s.pending, b.id)
	return s.saveLocked()
}

// registerLocked records a committed box; its generation changes unless its sets were kept.
func (s *server) registerLocked(b *box, keep bool, old *box) {
	if keep {
		b.gen = old.gen
	} else {
		s.gen++
		b.gen = s.gen
	}
	s.boxes[b.id] = b
	for _, a := range b.addrs {
		s.byAddr[a] = b
	}
}

func minus(a, b []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

func (s *server) remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil {
		if _, ok := s.pending[id]; ok {
			delete(s.pending, id)
			return s.saveLocked()
		}
		return nil
	}
	if s.cfg.pod {
		return badRequest("pod mode: PUT a spec instead")
	}
	text := addrElems("delete", b.tag, b.addrs, b.pol.needsDNS()) + clearBoxText(s.cfg, b.tag, b.rules) +
		fmt.Sprintf("delete chain %s %s\n", table, b.tag)
	if err := runNft(s.nft, text); err != nil {
		return err
	}
	delete(s.boxes, id)
	for _, a := range b.addrs {
		if s.byAddr[a] == b {
			delete(s.byAddr, a)
		}
	}
	return s.saveLocked()
}

// boxView is the JSON of GET /v1/boxes{,/id} and of state.json's entries.
type boxView struct {
	ID        string   `json:"id"`
	Addresses []string `json:"addresses"`
	Spec      Spec     `json:"spec"`
	DNS       []string `json:"dns,omitempty"`
	MACs      []string `json:"macs,omitempty"`
	// Pending (GET only): an entry of state.json the start could not install, retried; its spec
	// is the box's last one, which a caller must keep rather than replace with an older one.
	Pending bool `json:"pending,omitempty"`
}

func (s *server) list() []boxView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]boxView, 0, len(s.boxes)+len(s.pending))
	for _, b := range s.boxes {
		out = append(out, b.view())
	}
	for _, b := range s.pending {
		v := b.view()
		v.Pending = true
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *server) get(id string) (boxView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[id]; b != nil {
		return b.view(), true
	}
	if b := s.pending[id]; b != nil {
		v := b.view()
		v.Pending = true
		return v, true
	}
	return boxView{}, false
}

type stateFile struct {
	Version int       `json:"version"`
	Boxes   []boxView `json:"boxes"`
}

func (s *server) statePath() string { return filepath.Join(s.dir, "state.json") }

// saveLocked writes state.json atomically (temp file, fsync, rename): a crash leaves the old or
// the new file, never half of one.
func (s *server) saveLocked() error {
	views := make([]boxView, 0, len(s.boxes)+len(s.pending))
	held := map[string]bool{}
	for _, b := range s.boxes {
		views = append(views, b.view())
		for _, a := range b.addrStrings() {
			held[a] = true
		}
	}
	for _, b := range s.pending {
		// An address a box holds now has moved away from the pending entry.
		v := b.view()
		var addrs []string
		for _, a := range v.Addresses {
			if !held[a] {
				addrs = append(addrs, a)
			}
		}
		v.Addresses = addrs
		if v.Addresses == nil {
			v.Addresses = []string{}
		}
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool { return views[i].ID < views[j].ID })
	data, _ := json.Marshal(stateFile{Version: 1, Boxes: views})
	tmp := s.statePath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("applied, but saving state failed: %v", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.statePath())
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("applied, but saving state failed: %v", err)
	}
	return nil
}

// loadState reads state.json; a missing file is no boxes. Entries that no longer validate are
// dropped with a log line (their boxes stay fail-closed until sbx registers them again).
func (s *server) loadState() []*box {
	data, err := os.ReadFile(s.statePath())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Printf("state: %v (starting with no boxes)", err)
		}
		return nil
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		log.Printf("state: %s: %v (starting with no boxes)", s.statePath(), err)
		return nil
	}
	var out []*box
	seen := map[netip.Addr]bool{}
	for _, v := range st.Boxes {
		spec := v.Spec
		b, err := s.compileBoxInput(v.ID, &PutBody{Addresses: v.Addresses, Spec: &spec, DNS: v.DNS, MACs: v.MACs})
		if err != nil {
			log.Printf("state: box %q dropped: %v", v.ID, err)
			continue
		}
		b.addrs = minusSeen(b.addrs, seen)
		out = append(out, b)
	}
	return out
}

func minusSeen(as []netip.Addr, seen map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// install rebuilds the whole table with the given boxes in one transaction. If that fails (it
// should not: every box validated), the table alone is installed (unregistered boxes are dropped,
// so failing here fails closed) and each box is tried on its own; those the kernel still refuses
// stay pending: kept in state.json (their later PUTs must not be lost to a file rewritten without
// them) and reported by /v1/health.
func (s *server) install(boxes []*box) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.boxes, s.byAddr, s.pending, s.pendingErr = map[string]*box{}, map[netip.Addr]*box{}, nil, nil
	text := s.fullText(boxes)
	if err := runNft(s.nft, text); err == nil {
		for _, b := range boxes {
			s.registerLocked(b, false, nil)
		}
	} else {
		log.Printf("install with %d boxes failed, installing the empty table and each box alone: %v", len(boxes), err)
		if err := runNft(s.nft, s.fullText(nil)); err != nil {
			return err
		}
		for _, b := range boxes {
			if err := runNft(s.nft, s.boxText(b)); err != nil {
				log.Printf("install: box %q stays pending: %v", b.id, err)
				if s.pending == nil {
					s.pending = map[string]*box{}
				}
				s.pending[b.id] = b
				s.pendingErr = err
				continue
			}
			s.registerLocked(b, false, nil)
		}
	}
	// The table is in force; a state.json that cannot be written is reported by the next PUT.
	if err := s.saveLocked(); err != nil {
		log.Print(err)
	}
	return nil
}

// retryPending tries to install the pending boxes again (each alone); it reports whether some
// are still pending.
func (s *server) retryPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return false
	}
	for id, b := range s.pending {
		var addrs []netip.Addr
		for _, a := range b.addrs {
			if s.byAddr[a] == nil { // an address that moved to another box stays there
				addrs = append(addrs, a)
			}
		}
		b.addrs = addrs
		if err := runNft(s.nft, s.boxText(b)); err != nil {
			s.pendingErr = err
			continue
		}
		log.Printf("install: box %q installed on retry", id)
		s.registerLocked(b, false, nil)
		delete(s.pending, id)
	}
	if err := s.saveLocked(); err != nil {
		log.Print(err)
	}
	return len(s.pending) > 0
}

// health is nil unless boxes of state.json are not in force (see install).
func (s *server) health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	ids := make([]string, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return fmt.Errorf("boxes %s of state.json could not be installed (PUT or DELETE them again): %v", strings.Join(ids, ", "), s.pendingErr)
}

func (s *server) fullText(boxes []*box) string {
	var text strings.Builder
	text.WriteString(baseTableText(s.cfg))
	for _, b := range boxes {
		text.WriteString(s.boxText(b))
	}
	return text.String()
}

// boxText adds one box to a table that does not hold it yet.
func (s *server) boxText(b *box) string {
	var text strings.Builder
	if s.cfg.pod {
		fmt.Fprintf(&text, "flush chain %s box\n", table)
	} else {
		fmt.Fprintf(&text, "add chain %s %s\n", table, b.tag)
	}
	text.WriteString(addBoxText(s.cfg, b.tag, b.rules))
	if !s.cfg.pod {
		text.WriteString(addrElems("add", b.tag, b.addrs, b.pol.needsDNS()))
	}
	return text.String()
}

// boxFor finds the box a DNS query came from: by source address on a node; in pod mode every
// query is the pod's own.
func (s *server) boxFor(src netip.Addr) *box {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.pod {
		return s.boxes["self"]
	}
	return s.byAddr[src.Unmap()]
}

func (s *server) upstreamsFor(b *box) []netip.AddrPort {
	if len(b.upstreams) > 0 {
		return b.upstreams
	}
	return s.sysUpstreams
}

var errStale = errors.New("the box's policy changed during the query")

// learned is one address an answer gave, with its clamped lifetime.
type learned struct {
	addr netip.Addr
	ttl  time.Duration
}

// answer is what DNS last told a box about a name. A policy change re-decides each unexpired
// answer under the new policy and puts its addresses in the new sets in the same transaction, so
// connections to names the new policy still allows survive the change.
type answer struct {
	names   []string // the queried name and its CNAME chain
	addrs   []netip.Addr
	expires []time.Time
}

const maxAnswers = 4096

// maxLearned bounds the addresses one box's learned sets hold (set + address pairs, unexpired):
// past it the proxy answers REFUSED rather than grow the sets and the maps that mirror them.
const maxLearned = 4096

var errLearnFull = errors.New("the box's learned sets are full")

type learnedEntry struct {
	key     string
	expires time.Time
}

// learnBatch writes the elements for addrs into b's learned sets of the given classes. With
// skipFresh, an element whose kernel timeout is still more than half its new lifetime away is
// left alone: a hot name costs no nft run per query.
func learnBatch(b *box, allow, deny []class, addrs []netip.Addr, expires []time.Time, now time.Time, skipFresh bool) (string, []learnedEntry) {
	var text strings.Builder
	var fresh []learnedEntry
	write := func(sets []learnSet, classes []class) {
		for _, c := range classes {
			for _, ls := range sets {
				if ls.class != c {
					continue
				}
				for i, a := range addrs {
					ttl := expires[i].Sub(now).Round(time.Second)
					if ttl < time.Second {
						continue
					}
					set := ls.name6
					if a.Is4() {
						set = ls.name4
					}
					key := set + " " + a.String()
					if exp, ok := b.learned[key]; skipFresh && ok && exp.Sub(now) > ttl/2 {
						continue
					}
					text.WriteString(learnText(set, a, ttl))
					fresh = append(fresh, learnedEntry{key, now.Add(ttl)})
				}
			}
		}
	}
	write(b.rules.learnDeny, deny)
	write(b.rules.learnAllow, allow)
	return text.String(), fresh
}

func (b *box) remember(fresh []learnedEntry, now time.Time) {
	if b.learned == nil {
		b.learned = map[string]time.Time{}
	}
	for _, e := range fresh {
		b.learned[e.key] = e.expires
	}
	// Forget what the kernel has expired, so the map stays as small as the sets.
	if len(b.learned) > maxLearned {
		b.forgetExpired(now)
	}
}

func (b *box) forgetExpired(now time.Time) {
	for k, exp := range b.learned {
		if exp.Before(now) {
			delete(b.learned, k)
		}
	}
}

// newKeys: how many of fresh are not in b's learned sets yet.
func (b *box) newKeys(fresh []learnedEntry) int {
	n := 0
	seen := map[string]bool{}
	for _, e := range fresh {
		if _, ok := b.learned[e.key]; !ok && !seen[e.key] {
			seen[e.key] = true
			n++
		}
	}
	return n
}

// carryText re-decides old's answers under b's policy and writes the elements of those still
// allowed (or denied with ports) into b's new sets; it returns what b then holds.
func carryText(old, b *box, now time.Time) (string, []learnedEntry, map[string]answer) {
	var text strings.Builder
	var fresh []learnedEntry
	answers := map[string]answer{}
	for qname, ans := range old.answers {
		live := false
		for _, e := range ans.expires {
			live = live || e.After(now)
		}
		v := decide(b.pol, qname)
		if !live || v.nxdomain || deniedOutright(b.pol, ans.names) {
			continue
		}
		t, f := learnBatch(b, v.allow, denyClasses(b.pol, ans.names), ans.addrs, ans.expires, now, false)
		if len(fresh)+len(f) > maxLearned {
			continue // the new sets are bounded as the old were; the box resolves the name again
		}
		text.WriteString(t)
		fresh = append(fresh, f...)
		answers[qname] = ans
	}
	return text.String(), fresh, answers
}

// learn puts an answer's addresses in the box's learned sets of the given classes, in one
// transaction, before the answer goes back to the box.
func (s *server) learn(b *box, qname string, names []string, allow, deny []class, addrs []learned) error {
	if len(addrs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.boxes[b.id]
	if cur == nil || cur.gen != b.gen {
		return errStale
	}
	now := time.Now()
	ans := answer{names: names}
	for _, l := range addrs {
		ans.addrs = append(ans.addrs, l.addr)
		ans.expires = append(ans.expires, now.Add(l.ttl))
	}
	text, fresh := learnBatch(cur, allow, deny, ans.addrs, ans.expires, now, true)
	if added := cur.newKeys(fresh); added > 0 && len(cur.learned)+added > maxLearned {
		cur.forgetExpired(now)
		if len(cur.learned)+added > maxLearned {
			return errLearnFull
		}
	}
	if text != "" {
		if err := runNft(s.nft, text); err != nil {
			return err
		}
	}
	cur.remember(fresh, now)
	if cur.answers == nil {
		cur.answers = map[string]answer{}
	}
	if len(cur.answers) >= maxAnswers {
		for k, a := range cur.answers {
			if last := a.expires[len(a.expires)-1]; last.Before(now) {
				delete(cur.answers, k)
			}
		}
	}
	if len(cur.answers) < maxAnswers {
		cur.answers[qname] = ans
	}
	return nil
}
