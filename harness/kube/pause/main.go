// Command pause is the test cluster's pod sandbox ("pause") process: it holds the pod's namespaces
// open, reaps the zombies it inherits as PID 1 and exits 0 on SIGINT or SIGTERM. Built static
// (CGO_ENABLED=0) into a FROM scratch image by scripts/kube.sh; no registry is reachable here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
