// Command sbx-kube is the test cluster's one multi-call binary: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kubectl, compiled from the Go modules of one
// Kubernetes release (see go.mod) and the etcd release it pins. The component is the basename of
// argv[0] (a symlink) or the first argument: `sbx-kube kubelet --config …`. It also carries the
// cluster's PVC provisioner (local-provisioner, provisioner.go).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as in the upstream kube-apiserver and controller-manager mains

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func names() []string {
	n := []string{"etcd", "kubectl", "local-provisioner"}
	for k := range commands {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func known(name string) bool {
	_, ok := commands[name]
	return ok || name == "etcd" || name == "kubectl" || name == "local-provisioner"
}

func main() {
	name := filepath.Base(os.Args[0])
	if !known(name) {
		if len(os.Args) < 2 || !known(os.Args[1]) {
			fmt.Fprintf(os.Stderr, "usage: %s COMPONENT [args...], or call it through a symlink named COMPONENT\ncomponents: %v\n", name, names())
			os.Exit(2)
		}
		name = os.Args[1]
		// Every component reads os.Args itself (cobra, etcd's flag set, kubectl's plugin lookup).
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	switch name {
	case "local-provisioner":
		os.Exit(runProvisioner(os.Args[1:]))
	case "etcd":
		etcdmain.Main(os.Args)
	case "kubectl":
		// As upstream's cmd/kubectl: verbosity is set before the command is built.
		_, _ = logs.GlogSetter(kubectl.GetLogVerbosity(os.Args))
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		os.Exit(cli.Run(commands[name]()))
	}
}
