// Command sbx-agent is the in-box agent of sbx: injected by the Docker runtime as the box's
// PID 1, it reaps zombies, forwards SIGTERM/SIGINT to the box's command and exits with it,
// serves the exec API on a TCP port to the host alone (a per-box token), and sends heartbeats.
// Standard library only, built static (CGO_ENABLED=0): it runs in any image, FROM scratch
// included. See docs/agent.md.
//
//	sbx-agent init [--user U] [--home] [--drop-caps N,N] [--listen ADDR] [-- CMD ARGS...]
//	sbx-agent install DEST            (copies this binary to DEST, mode 0755: the Kubernetes init container)
//	sbx-agent hello tcp:HOST:PORT [CMD...]   (speaks to an agent as the host would; prints its frames)
//	sbx-agent version
//	sbx-agent fs OP PATH [ARG] [--recursive]   (one file operation as the calling user; fs.go)
//	sbx-agent spawn-bench N CMD...   (N bare spawns of CMD, their µs: the bench's SpawnInBox floor)
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

type initConfig struct {
	user     string
	home     bool
	dropCaps []int
	// listen: the TCP address the exec API is served on (Docker: every address of the box, the
	// host dials its bridge address; Kubernetes: the loopback, where the port-forward connects);
	// peers must present $SBX_AGENT_TOKEN. Empty: init only.
	listen string
	cmd    []string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sbx-agent init [--user U] [--home] [--drop-caps N,...] [--listen ADDR] [-- CMD...] | install DEST | ps | version")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "hello":
		// sbx-agent hello tcp:HOST:PORT [CMD...]: speaks to an agent as the host would and prints
		// its frames (debugging, and the test that a box process is refused).
		if len(os.Args) < 3 {
			fmt.Fprintln(os.Stderr, "usage: sbx-agent hello tcp:HOST:PORT [CMD...]")
			os.Exit(2)
		}
		os.Exit(runHello(os.Args[2], os.Args[3:]))
	case "spawn-bench":
		os.Exit(runSpawnBench(os.Args[2:]))
	case "fs":
		os.Exit(runFs(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case "ps":
		// sbx-agent ps: the box's processes as JSON (ps.go), where the engine cannot list them.
		os.Exit(runPs(os.Stdout))
	case "install":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: sbx-agent install DEST")
			os.Exit(2)
		}
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "sbx-agent: install: %v\n", err)
			os.Exit(1)
		}
	case "version":
		fmt.Printf("sbx-agent %s protocol %d\n", AgentVersion, ProtocolVersion)
	case "init":
		cfg, err := parseInit(os.Args[2:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "sbx-agent: %v\n", err)
			os.Exit(2)
		}
		os.Exit(runInit(cfg))
	default:
		fmt.Fprintf(os.Stderr, "sbx-agent: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func parseInit(args []string) (initConfig, error) {
	var cfg initConfig
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		switch a {
		case "--":
			cfg.cmd = args[i+1:]
			return cfg, nil
		case "--user":
			v, err := next()
			if err != nil {
				return cfg, err
			}
			cfg.user = v
		case "--home":
			cfg.home = true
		case "--socket":
			// The unix socket in a host directory is gone (a box could write there); pods
			// created before still say --socket '' (none), which stays accepted.
			v, err := next()
			if err != nil {
				return cfg, err
			}
			if v != "" {
				return cfg, fmt.Errorf("--socket: the agent serves TCP only (--listen)")
			}
		case "--listen":
			v, err := next()
			if err != nil {
				return cfg, err
			}
			cfg.listen = v
		case "--drop-caps":
			v, err := next()
			if err != nil {
				return cfg, err
			}
			for _, s := range strings.Split(v, ",") {
				if s == "" {
					continue
				}
				n, err := strconv.Atoi(s)
				if err != nil || n < 0 || n > 63 {
					return cfg, fmt.Errorf("--drop-caps: bad capability number %q", s)
				}
				cfg.dropCaps = append(cfg.dropCaps, n)
			}
		default:
			return cfg, fmt.Errorf("unknown option %q", a)
		}
	}
	return cfg, nil
}
