package main

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// An OOM kill of the box's command, said where the host can check it (docs/agent.md, "OOM kills").
// Docker 20.10 sets its OOMKilled flag only when containerd's OOM event for the container arrives
// before its exit event; the shim's OOM watcher and its exit path race, and on a loaded machine
// the exit sometimes wins and the flag stays false. The agent is the command's parent inside the
// box's memory cgroup: when the command dies of SIGKILL (or exits 137, as a shell does whose child
// died so) and the cgroup's OOM-kill counter has grown since the agent started, the kernel's OOM
// killer did it. The agent then writes one line
// to its stderr (the container's log) that ends in a proof only the holder of the box's token can
// make (box processes never see the token), so the command cannot forge it by printing the line.

// oomMarker opens the line; oomProof closes it, as "[oom:<proof>]".
const oomMarker = "sbx-agent: the command was killed by the kernel's OOM killer (the box's memory limit)"

// oomProof is HMAC-SHA256 keyed with the box's token over a fixed label, cut to 16 bytes (hex):
// the host, which holds the token, checks it (src/runtime/agent-client.ts oomProof).
func oomProof(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("sbx-agent-oom"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func oomLine(token string) string {
	return fmt.Sprintf("%s [oom:%s]\n", oomMarker, oomProof(token))
}

// oomCounter reads the OOM kills of the box's memory cgroup: `oom_kill N` of memory.events
// (cgroup v2) or of memory.oom_control (cgroup v1, Linux 4.13 and later).
type oomCounter struct{ path string }

// findOOMCounter picks the file at start: the box's own cgroup as /proc/self/cgroup names it
// (a host cgroup namespace on v2 shows the whole tree), else the mount's root (a private cgroup
// namespace, or v1, where the engine mounts the box's own cgroup there). Nil when there is none
// (a kernel without the counter, a sandboxed runtime without cgroupfs).
func findOOMCounter(root, selfCgroup string) *oomCounter {
	var v2Path, v1Path string
	if data, err := os.ReadFile(selfCgroup); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				v2Path = parts[2]
			}
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					v1Path = parts[2]
				}
			}
		}
	}
	var candidates []string
	if v2Path != "" {
		candidates = append(candidates, filepath.Join(root, v2Path, "memory.events"))
	}
	candidates = append(candidates, filepath.Join(root, "memory.events"))
	if v1Path != "" {
		candidates = append(candidates, filepath.Join(root, "memory", v1Path, "memory.oom_control"))
	}
	candidates = append(candidates, filepath.Join(root, "memory", "memory.oom_control"))
	for _, p := range candidates {
		c := &oomCounter{path: p}
		if _, ok := c.read(); ok {
			return c
		}
	}
	return nil
}

func (c *oomCounter) read() (uint64, bool) {
	f, err := os.Open(c.path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return parseOOMKills(f)
}

// parseOOMKills finds the `oom_kill N` line (not oom_group_kill) of either file.
func parseOOMKills(r io.Reader) (uint64, bool) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		key, value, ok := bytes.Cut(bytes.TrimSpace(s.Bytes()), []byte(" "))
		if !ok || string(key) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// oomWatch is what the agent knows at start: the counter and its value then.
type oomWatch struct {
	counter *oomCounter
	start   uint64
	token   string
}

// newOOMWatch reads the counter before the command starts; nil without a token (no proof to
// give: the engine's flag alone) or without a counter.
func newOOMWatch(token string) *oomWatch {
	if token == "" {
		return nil
	}
	c := findOOMCounter("/sys/fs/cgroup", "/proc/self/cgroup")
	if c == nil {
		return nil
	}
	n, _ := c.read()
	return &oomWatch{counter: c, start: n, token: token}
}

// oomSettleTime bounds the wait for the counter after a SIGKILL: the kernel counts the kill after
// it sends the signal and prints its "Killed process" report (printk, which a busy console can
// hold for tens of milliseconds), so the victim can be reaped first. 50 ms proved too short on a
// loaded CI machine (the line went missing twice); a SIGKILL the OOM killer did not send costs
// this much on the way out, which only a box whose own command is SIGKILLed pays.
const oomSettleTime = 1 * time.Second

// killedByOOM says whether the counter grew since start (the command just ended with 137).
func (w *oomWatch) killedByOOM() bool {
	deadline := time.Now().Add(oomSettleTime)
	for {
		if n, ok := w.counter.read(); ok && n > w.start {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// report writes the marker line when the OOM killer took the command.
func (w *oomWatch) report(out io.Writer) {
	if w != nil && w.killedByOOM() {
		_, _ = io.WriteString(out, oomLine(w.token))
	}
}
