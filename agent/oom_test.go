package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseOOMKills(t *testing.T) {
	cases := []struct {
		name, text string
		n          uint64
		ok         bool
	}{
		{"v1 memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", 1, true},
		{"v2 with oom_group_kill first", "oom_group_kill 7\noom_kill 0\n", 0, true},
		{"v1 before Linux 4.13", "oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"garbage", "oom_kill many\n", 0, false},
	}
	for _, c := range cases {
		n, ok := parseOOMKills(strings.NewReader(c.text))
		if n != c.n || ok != c.ok {
			t.Errorf("%s: got %d %v, want %d %v", c.name, n, ok, c.n, c.ok)
		}
	}
}

func TestFindOOMCounter(t *testing.T) {
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id := "docker/c8ab17c8f3c0"
	cases := []struct {
		name, self string
		files      map[string]string
		want       string
	}{
		// Docker on cgroup v1 (this machine): the box's memory cgroup is mounted at memory/.
		{"v1", "4:memory:/" + id + "\n0::/" + id + "\n", map[string]string{"memory/memory.oom_control": "oom_kill 0\n"}, "memory/memory.oom_control"},
		// v1 with the whole hierarchy mounted: the box's own directory, not the root's.
		{"v1 whole tree", "4:memory:/" + id + "\n", map[string]string{
			"memory/memory.oom_control": "oom_kill 9\n", "memory/" + id + "/memory.oom_control": "oom_kill 0\n",
		}, "memory/" + id + "/memory.oom_control"},
		// v2 with a private cgroup namespace: the box's cgroup is the mount's root.
		{"v2 private namespace", "0::/\n", map[string]string{"memory.events": "oom 0\noom_kill 0\n"}, "memory.events"},
		// v2 with the host's cgroup namespace: the box's own directory.
		{"v2 host namespace", "0::/" + id + "\n", map[string]string{"cgroup.controllers": "memory\n", id + "/memory.events": "oom_kill 0\n"}, id + "/memory.events"},
		{"none", "0::/\n", map[string]string{"memory/memory.oom_control": "oom_kill_disable 0\n"}, ""},
	}
	for _, c := range cases {
		root := t.TempDir()
		for p, text := range c.files {
			write(filepath.Join(root, p), text)
		}
		self := filepath.Join(t.TempDir(), "cgroup")
		write(self, c.self)
		got := findOOMCounter(root, self)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: found %s, want none", c.name, got.path)
		case c.want != "" && (got == nil || got.path != filepath.Join(root, c.want)):
			t.Errorf("%s: found %v, want %s", c.name, got, c.want)
		}
	}
}

func TestOOMReport(t *testing.T) {
	file := filepath.Join(t.TempDir(), "memory.oom_control")
	os.WriteFile(file, []byte("oom_kill 2\n"), 0o644)
	token := strings.Repeat("ab", 32)
	w := &oomWatch{counter: &oomCounter{path: file}, start: 2, token: token}
	var out bytes.Buffer
	w.report(&out)
	if out.Len() != 0 {
		t.Fatalf("a SIGKILL with no OOM kill since start wrote %q", out.String())
	}
	os.WriteFile(file, []byte("oom_kill 3\n"), 0o644)
	w.report(&out)
	// The same vector is checked on the host side (src/runtime/docker/agent-oom.test.ts).
	want := oomMarker + " [oom:6005236cfb0534534e172610a7e3d6c3]\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	var none *oomWatch
	none.report(&out) // no token or no counter: nothing, and no panic
}
