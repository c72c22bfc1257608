package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestPsListsProcessesWithTheirCommandLines(t *testing.T) {
	sleep := exec.Command("sleep", "417")
	if err := sleep.Start(); err != nil {
		t.Skip("no sleep here")
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	var out bytes.Buffer
	if code := runPs(&out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var list []psEntry
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var found *psEntry
	for i, p := range list {
		if p.Pid == strconv.Itoa(os.Getpid()) {
			t.Fatal("ps lists itself")
		}
		if p.Pid == strconv.Itoa(sleep.Process.Pid) {
			found = &list[i]
		}
	}
	if found == nil || found.Command != "sleep 417" || found.User == "" {
		t.Fatalf("the sleep as %+v in %s", found, out.String())
	}
}
