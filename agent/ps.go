package main

import (
	"encoding/json"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// psEntry is one process of the box as `sbx-agent ps` prints it (the Runtime's ProcessInfo).
type psEntry struct {
	Pid     string `json:"pid"`
	User    string `json:"user"`
	Command string `json:"command"`
}

// runPs prints the box's processes as a JSON array, read from the box's own /proc: where the
// engine's `top` cannot see them (gVisor: the box's processes live in its own kernel, and the
// engine's `ps` on the host lists the host's). The command line is the process's arguments
// joined by spaces, or its name in brackets when it has none, as ps shows them; the user is
// the effective uid's name in the box's /etc/passwd, else the number. This process is left out.
func runPs(out io.Writer) int {
	names := map[uint32]string{}
	for _, e := range readPasswd() {
		if _, ok := names[e.uid]; !ok {
			names[e.uid] = e.name
		}
	}
	self := os.Getpid()
	procs := readProcs()
	pids := make([]int, 0, len(procs))
	for pid := range procs {
		if pid != self {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	list := make([]psEntry, 0, len(pids))
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		cmdline, err := os.ReadFile(dir + "/cmdline")
		if err != nil {
			continue // gone meanwhile
		}
		command := strings.TrimSpace(strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
		if command == "" {
			command = "[" + procs[pid].comm + "]"
		}
		user := ""
		if uid, ok := effectiveUID(dir); ok {
			user = strconv.FormatUint(uint64(uid), 10)
			if name, ok := names[uid]; ok {
				user = name
			}
		}
		list = append(list, psEntry{Pid: strconv.Itoa(pid), User: user, Command: command})
	}
	if err := json.NewEncoder(out).Encode(list); err != nil {
		return 1
	}
	return 0
}

// effectiveUID reads the effective uid from a process's status (the second of its Uid line).
func effectiveUID(dir string) (uint32, bool) {
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			uid, err := strconv.ParseUint(f[2], 10, 32)
			return uint32(uid), err == nil
		}
	}
	return 0, false
}
