#!/usr/bin/env bash
# The test cluster: a single-node Kubernetes on this machine, compiled from Go modules
# (harness/kube), over its own containerd (also from Go modules: harness/kube/containerd.sh). Everything listens on 127.0.0.1 except the kubelet, which
# the API server reaches on the node IP (the CNI bridge's address: a node IP cannot be loopback).
#
#   scripts/kube.sh up     build or reuse the binary, start every component, wait for the node to be
#                          Ready and a pod to exec; last line KUBECONFIG=<least-privilege kubeconfig>
#   scripts/kube.sh down   stop what up started (by pid file), remove its pods' processes, mounts,
#                          network devices and iptables rules; keeps certificates, etcd data, images
#   scripts/kube.sh down --purge   the same, then remove the state directory and the PV data
#   scripts/kube.sh env    the variables (NAME=value lines; KUBECONFIG last)
#   scripts/kube.sh build  only build (or find) the binaries; prints the Kubernetes one's directory
#
# gVisor (docs/isolation.md): when scripts/gvisor.sh has built runsc (in SBX_GVISOR_BIN, default
# /usr/local/lib/sbx-gvisor), containerd gets the runtime handler `runsc` (gVisor's shim, built here
# with one line patched: ensure_gvisor_shim) and the cluster the RuntimeClass `gvisor` (a pool's
# `ociRuntime: gvisor` runs its boxes there), and up's smoke test runs a pod of it on gVisor. Without
# runsc, or when that pod does not run on gVisor, up goes on without gVisor, says so, and removes a
# RuntimeClass an earlier up made; run scripts/gvisor.sh, then up again. SBX_KUBE_GVISOR=0 leaves
# gVisor out on purpose.
#
# SBX_KUBE_CONTAINERD_VERSION picks the containerd (default below; empty: the system's, Debian's 1.6,
# which cannot mount image volumes, so boxes get the agent from an init container). Changing it
# takes `down` then `up` (up does that itself when the running containerd is another binary).
#
# docs/kubernetes.md ("Test cluster") describes what runs, the numbers and what is left out.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

t0=$(now_ms)
KUBE_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$SBX_ROOT/harness/kube/go.mod" | head -n 1)
[ -n "$KUBE_VERSION" ] || die "no k8s.io/kubernetes requirement in harness/kube/go.mod"
STATE=${SBX_KUBE_STATE:-/var/lib/sbx-kube}
RUN=${SBX_KUBE_RUN:-/run/sbx-kube}
LOGS=${SBX_KUBE_LOGS:-/var/log/sbx-kube}
CACHE=${SBX_KUBE_CACHE:-/var/cache/sbx-kube}
API_PORT=${SBX_KUBE_API_PORT:-6443}
ETCD_PORT=${SBX_KUBE_ETCD_PORT:-23790}
ETCD_PEER_PORT=${SBX_KUBE_ETCD_PEER_PORT:-23800}
KUBELET_PORT=${SBX_KUBE_KUBELET_PORT:-10250}
UP_TIMEOUT_S=${SBX_KUBE_TIMEOUT:-180}
# Image volumes (the agent's binary in a box) need containerd >= 2.1.
CONTAINERD_VERSION=${SBX_KUBE_CONTAINERD_VERSION-v2.2.9}
NODE=sbx-kube
# gVisor's runtime handler in containerd and the RuntimeClass that names it.
GVISOR_BIN=${SBX_GVISOR_BIN:-/usr/local/lib/sbx-gvisor}
GVISOR_HANDLER=runsc
GVISOR_CLASS=gvisor
# What a gVisor pod needs beyond its containers' limits: the Sentry and the gofers live in the pod's
# cgroup, and a box's memory is the Sentry's: an idle gVisor pod holds about 24 MB. Without it a box
# of 16 MiB cannot even start.
GVISOR_OVERHEAD_MEMORY=64Mi
NAMESPACE=sbx-test
# Pods on a bridge of their own; none of these overlap Docker's 172.17.0.0/16.
BRIDGE=sbxkube0
POD_SUBNET=10.244.0.0/24
NODE_IP=10.244.0.1
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
IMAGES=(sbx-base:latest sbx-test:latest sbx-e2b:latest sbx-desktop:latest sbx-agent:latest sbx-egress:latest)

PKI=$STATE/pki
KCFG=$STATE/kubeconfig
KUBELET_DIR=$STATE/kubelet
CTR_ROOT=$STATE/containerd
CTR_STATE=$RUN/containerd
CTR_SOCK=$CTR_STATE/containerd.sock
CNI_CONF_DIR=$STATE/cni/net.d
CNI_IPAM_DIR=$STATE/cni/networks
CNI_BIN=/usr/lib/cni
CGROUP_ROOT=/sbx-kube
PV_DIR=$STATE/pv # one directory per PersistentVolume (harness/kube/provisioner.go)
ADMIN_KCFG=$KCFG/admin.kubeconfig
SBX_KCFG=$KCFG/sbx.kubeconfig
API=https://127.0.0.1:$API_PORT
# What each component's command line contains (alive() checks it against its pid file): a path of
# ours, not the binary's, so processes of an older build are still found and stopped.
M_ETCD="--data-dir $STATE/etcd"
M_API="--tls-cert-file $PKI/apiserver.crt"
M_KCM="--kubeconfig $KCFG/controller-manager.kubeconfig"
M_SCHED="--kubeconfig $KCFG/scheduler.kubeconfig"
M_KUBELET="--config $STATE/kubelet.yaml"
M_PROV="-dir $PV_DIR"

did=()
note() { did+=("$*"); }

# --- the binary -------------------------------------------------------------------------------------

# The cache key: the version plus a hash of everything that decides what is compiled.
bin_dir() {
  local h
  h=$(cd "$SBX_ROOT/harness/kube" && cat go.mod go.sum build.sh ./*.go pause/* | sha256sum | cut -c1-12)
  printf '%s/%s-%s' "$CACHE" "$KUBE_VERSION" "$h"
}
BIN=$(bin_dir)
PAUSE_IMAGE=sbx-kube-pause:${BIN##*-}
# containerd, its shim and ctr: ours, built at CONTAINERD_VERSION, else the system's.
if [ -n "$CONTAINERD_VERSION" ]; then
  CTRD_DIR=$CACHE/containerd-$CONTAINERD_VERSION
  CTRD=$CTRD_DIR/containerd
  CTR=$CTRD_DIR/ctr
else
  CTRD_DIR=
  CTRD=$(command -v containerd || echo /usr/bin/containerd)
  CTR=$(command -v ctr || echo /usr/bin/ctr)
fi

ensure_binary() {
  [ -x "$BIN/sbx-kube" ] && [ -x "$BIN/pause" ] && return 0
  hold_lock kube # the one lock (lib.sh's hold_lock holds one at a time); up holds it already
  [ -x "$BIN/sbx-kube" ] && [ -x "$BIN/pause" ] && return 0
  have go || die "go is not installed; it is needed once to build $BIN"
  local t log=$LOGS/build.log
  mkdir -p "$LOGS"
  t=$(now_ms)
  warn "building Kubernetes $KUBE_VERSION into $BIN (several minutes when cold; log $log)"
  # nice: two cores, shared with other work. GOCACHE of our own, so its size is ours to see and free.
  if ! GOCACHE=${SBX_KUBE_GOCACHE:-$CACHE/go-build} nice -n 15 "$SBX_ROOT/harness/kube/build.sh" "$BIN" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "build failed (log: $log)"
  fi
  # The build cache is ~6 GB and only a rebuild after a change to harness/kube would use it.
  [ "${SBX_KUBE_KEEP_GOCACHE:-0}" = 1 ] || rm -rf "${SBX_KUBE_GOCACHE:-$CACHE/go-build}"
  note "built $KUBE_VERSION in $(elapsed "$t")"
}

ensure_containerd() {
  [ -n "$CTRD_DIR" ] || return 0
  [ -x "$CTRD" ] && [ -x "$CTRD_DIR/containerd-shim-runc-v2" ] && [ -x "$CTR" ] && return 0
  hold_lock kube
  [ -x "$CTRD" ] && [ -x "$CTRD_DIR/containerd-shim-runc-v2" ] && [ -x "$CTR" ] && return 0
  have go || die "go is not installed; it is needed once to build containerd $CONTAINERD_VERSION into $CTRD_DIR"
  local t log=$LOGS/build-containerd.log gocache=${SBX_KUBE_GOCACHE:-$CACHE/go-build}
  mkdir -p "$LOGS"
  t=$(now_ms)
  warn "building containerd $CONTAINERD_VERSION into $CTRD_DIR (a few minutes when cold; log $log)"
  if ! GOCACHE=$gocache nice -n 15 "$SBX_ROOT/harness/kube/containerd.sh" "$CTRD_DIR" "$CONTAINERD_VERSION" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "containerd build failed (log: $log; SBX_KUBE_CONTAINERD_VERSION= uses the system's)"
  fi
  [ "${SBX_KUBE_KEEP_GOCACHE:-0}" = 1 ] || rm -rf "$gocache"
  note "built containerd $CONTAINERD_VERSION in $(elapsed "$t")"
}

# --- processes ----------------------------------------------------------------------------------------

pidfile() { printf '%s/%s.pid' "$RUN" "$1"; }

# True when the pid file names a live process whose command line still contains $2 (our binary or
# config path), so a recycled pid is never taken for ours.
alive() {
  local pid
  pid=$(cat "$(pidfile "$1")" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  # Read whole, then matched: `tr | grep -q` under pipefail can fail on SIGPIPE after a match.
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$2"* ]]
}

# start NAME MARKER CMD...: detached (own session, no inherited fds), output to $LOGS/NAME.log,
# pid in $RUN/NAME.pid. MARKER is what alive() looks for in its command line.
start() {
  local name=$1 marker=$2 pf
  shift 2
  alive "$name" "$marker" && return 0
  pf=$(pidfile "$name")
  rm -f "$pf"
  mkdir -p "$LOGS" "$RUN"
  printf '\n==== %s: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$LOGS/$name.log"
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -le 2 ] || eval "exec $fd>&-"
    done 2>/dev/null
    # shellcheck disable=SC2016 # expanded by the inner bash
    exec setsid -f bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pf" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  )
  local i
  for i in $(seq 50); do
    [ -s "$pf" ] && break
    sleep 0.05
  done
  [ -s "$pf" ] || die "$name did not start (log: $LOGS/$name.log)"
  note "started $name"
}

# stop NAME MARKER [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 15).
stop() {
  local name=$1 marker=$2 secs=${3:-15} pid i
  if alive "$name" "$marker"; then
    pid=$(cat "$(pidfile "$name")")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq $((secs * 10))); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      note "killed $name (pid $pid) after ${secs}s"
    else
      note "stopped $name"
    fi
  fi
  rm -f "$(pidfile "$name")"
}

# wait_for WHAT SECONDS LOGNAME CMD...: polls CMD until it succeeds; on timeout prints the log's tail.
wait_for() {
  local what=$1 secs=$2 log=$3 deadline
  shift 3
  deadline=$(($(now_ms) + secs * 1000))
  until "$@" >/dev/null 2>&1; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      [ -z "$log" ] || { tail -n 25 "$LOGS/$log.log" >&2 || true; }
      die "$what: not after ${secs}s${log:+ (log above: $LOGS/$log.log)}"
    fi
    sleep 0.2
  done
}

# write_config NAME FILE < content: writes FILE; when the content changed and NAME runs, stops it so
# that the start that follows uses the new file.
write_config() {
  local name=$1 file=$2 marker=$3
  cat >"$file.new"
  if cmp -s "$file.new" "$file"; then
    rm -f "$file.new"
    return 0
  fi
  mv -f "$file.new" "$file"
  alive "$name" "$marker" && { stop "$name" "$marker" 30; note "restarted $name: $file changed"; }
  return 0
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$ADMIN_KCFG" "$@"; }
kubectl_sbx() { "$BIN/kubectl" --kubeconfig "$SBX_KCFG" "$@"; }
ctr_() { "$CTR" --address "$CTR_SOCK" --namespace k8s.io "$@"; }

# --- host set-up ----------------------------------------------------------------------------------

ensure_packages() {
  local missing
  mapfile -t missing < <(missing_packages containerd runc containernetworking-plugins iptables openssl curl iproute2)
  [ "${#missing[@]}" -eq 0 ] || apt_install "${missing[@]}"
}

# The facts the kubelet configuration depends on, read off this machine rather than assumed.
CGROUP_V1=false
check_host() {
  [ "$(id -u)" = 0 ] || die "the test cluster needs root (containerd, the kubelet, mounts, network)"
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CGROUP_V1=false # unified (v2) only
  elif [ -d /sys/fs/cgroup/memory ]; then
    CGROUP_V1=true # v1, or hybrid: v1 controllers with a v2 hierarchy at /sys/fs/cgroup/unified
  else
    die "no cgroup hierarchy with a memory controller under /sys/fs/cgroup"
  fi
  if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    modprobe br_netfilter 2>/dev/null || die "br_netfilter is not available (/proc/sys/net/bridge missing; modprobe br_netfilter failed)"
  fi
  [ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || { echo 1 >/proc/sys/net/ipv4/ip_forward && note "enabled ip_forward"; }
  # The kubelet makes its own root directory a shared mount (a bind mount onto itself), which is
  # all mount propagation needs here; `/` itself stays as it is (private on these machines).
}

# The bridge exists before the kubelet starts because its address is the node IP; the CNI bridge
# plugin finds it and keeps it. Docker sets the FORWARD policy to DROP and br_netfilter sends bridged
# traffic through FORWARD, so two rules of ours (tagged with a comment) let the bridge's traffic pass.
FWD_RULES=("-i $BRIDGE -m comment --comment sbx-kube -j ACCEPT" "-o $BRIDGE -m comment --comment sbx-kube -j ACCEPT")
ensure_network() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    note "created bridge $BRIDGE"
  fi
  # `replace` adds the address or leaves it as it is: a `show | grep -q || add` under pipefail lost a
  # SIGPIPE race in CI (grep quit first, the pipe failed, and `add` met "Address already assigned").
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local r
  for r in "${FWD_RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -C FORWARD $r 2>/dev/null || iptables -w -A FORWARD $r
  done
  mkdir -p "$CNI_CONF_DIR" "$CNI_IPAM_DIR"
  cat >"$CNI_CONF_DIR/10-sbx-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sbx-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET", "gateway": "$NODE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$CNI_IPAM_DIR"
      }
    }
  ]
}
EOF
}

# --- certificates and kubeconfigs -------------------------------------------------------------------

# cert NAME SUBJECT EKU [SANS]: an EC P-256 key and a certificate signed by the cluster CA.
cert() {
  local name=$1 subj=$2 eku=$3 sans=${4:-} ext
  [ -s "$PKI/$name.crt" ] && return 0
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
  ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku"
  [ -z "$sans" ] || ext+=$'\n'"subjectAltName=$sans"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" 2>/dev/null |
    openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 -sha256 \
      -extfile <(printf '%s\n' "$ext") -out "$PKI/$name.crt" 2>/dev/null
}

ensure_pki() {
  mkdir -p "$PKI" "$KCFG"
  chmod 700 "$PKI" "$KCFG"
  if [ ! -s "$PKI/ca.crt" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj /CN=sbx-kube-ca -days 3650 -sha256 \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      -out "$PKI/ca.crt" 2>/dev/null
    note "created the cluster CA"
  fi
  if [ ! -s "$PKI/sa.key" ]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  cert apiserver /CN=kube-apiserver serverAuth \
    "IP:127.0.0.1,DNS:localhost,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert kubelet "/O=system:nodes/CN=system:node:$NODE" serverAuth,clientAuth "IP:$NODE_IP,DNS:$NODE"
  cert controller-manager /CN=system:kube-controller-manager clientAuth
  cert scheduler /CN=system:kube-scheduler clientAuth
  cert admin "/O=system:masters/CN=sbx-kube-admin" clientAuth
  local who
  for who in admin controller-manager scheduler kubelet; do
    [ -s "$KCFG/$who.kubeconfig" ] || kubeconfig_cert "$who" >"$KCFG/$who.kubeconfig"
  done
  chmod 600 "$PKI"/*.key "$KCFG"/*.kubeconfig
}

b64() { base64 -w0 <"$1"; }

kubeconfig_cert() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sbx-kube
  cluster:
    server: $API
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(b64 "$PKI/$1.crt")
    client-key-data: $(b64 "$PKI/$1.key")
contexts:
- name: $1@sbx-kube
  context: { cluster: sbx-kube, user: $1 }
current-context: $1@sbx-kube
EOF
}

# --- components -------------------------------------------------------------------------------------

api_ready() {
  curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$API/readyz" >/dev/null
}

# Whether gVisor can be offered: runsc built (scripts/gvisor.sh) and not turned off. GVISOR_MISSING
# says why not, for the message up prints.
GVISOR_MISSING=
gvisor_check() {
  if [ "${SBX_KUBE_GVISOR:-1}" = 0 ]; then
    GVISOR_MISSING="SBX_KUBE_GVISOR=0"
  elif [ ! -x "$GVISOR_BIN/runsc" ]; then
    GVISOR_MISSING="no $GVISOR_BIN/runsc (scripts/gvisor.sh builds it; then kube.sh up again)"
  elif [ ! -x "$GVISOR_SHIM" ] && ! have go; then
    GVISOR_MISSING="go is not installed; it is needed once to build $GVISOR_SHIM"
  fi
}

# gVisor's containerd shim, patched in one line. At each sandbox's start it lowers its own
# oom_score_adj to -999, which needs CAP_SYS_RESOURCE, and fails the sandbox when that is refused:
# root on these machines lacks the capability ("failed to set OOM Score on shim: permission denied"
# for every pod). Patched, a refused write leaves the shim at containerd's score, as runc's shims
# are here (restrict_oom_score_adj). containerd's runc shim driving runsc (as dockerd does) is no
# way round it: it neither sees a pod's second container exit nor gets its output (runsc hands
# that container the stdio of `runsc start`). Built from the version harness/gvisor pins (the
# same module scripts/gvisor.sh builds), cached by that and the patch.
SHIM_OOM_OLD='if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {'
SHIM_OOM_NEW='if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil && !os.IsPermission(err) {'
gvisor_shim_path() {
  local h
  h=$({ cat "$SBX_ROOT/harness/gvisor/go.mod" "$SBX_ROOT/harness/gvisor/go.sum" 2>/dev/null; printf '%s\n' "$SHIM_OOM_OLD" "$SHIM_OOM_NEW"; } | sha256sum | cut -c1-12)
  printf '%s/gvisor-shim-%s/containerd-shim-runsc-v1' "$CACHE" "$h"
}
GVISOR_SHIM=$(gvisor_shim_path)
gvisor_check

# Builds the patched shim once (seconds when scripts/gvisor.sh has warmed Go's caches). A build
# that fails turns gVisor off for this up, with the reason, rather than failing the cluster.
ensure_gvisor_shim() {
  [ -z "$GVISOR_MISSING" ] && [ ! -x "$GVISOR_SHIM" ] || return 0
  local dir=${GVISOR_SHIM%/*} log=$LOGS/build-gvisor-shim.log t src tmp file content
  t=$(now_ms)
  mkdir -p "$LOGS" "$dir"
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  if ! src=$(cd "$SBX_ROOT/harness/gvisor" && go mod download -json gvisor.dev/gvisor 2>>"$log" | awk -F'"' '$2 == "Dir" { print $4 }') || [ -z "$src" ]; then
    rm -rf "$tmp"
    GVISOR_MISSING="the gVisor module of harness/gvisor could not be downloaded (log: $log)"
    return 0
  fi
  cp -r "$src" "$tmp/gvisor" && chmod -R u+w "$tmp/gvisor"
  file=$tmp/gvisor/pkg/shim/v1/manager.go
  content=$(<"$file")
  if [[ $content != *"$SHIM_OOM_OLD"* ]]; then
    rm -rf "$tmp"
    GVISOR_MISSING="the runsc shim of harness/gvisor's version no longer has the line kube.sh patches (${SHIM_OOM_OLD}): update the patch"
    return 0
  fi
  printf '%s\n' "${content/"$SHIM_OOM_OLD"/"$SHIM_OOM_NEW"}" >"$file"
  cp "$SBX_ROOT/harness/gvisor/go.mod" "$SBX_ROOT/harness/gvisor/go.sum" "$tmp/"
  printf '\nreplace gvisor.dev/gvisor => %s/gvisor\n' "$tmp" >>"$tmp/go.mod"
  if (cd "$SBX_ROOT/harness/gvisor" && CGO_ENABLED=0 nice -n 15 go build -modfile="$tmp/go.mod" -trimpath -ldflags='-s -w' -o "$tmp/shim" gvisor.dev/gvisor/shim) >>"$log" 2>&1; then
    mv -f "$tmp/shim" "$GVISOR_SHIM"
    note "built the runsc shim in $(elapsed "$t")"
  else
    GVISOR_MISSING="building the runsc shim failed (log: $log)"
  fi
  rm -rf "$tmp"
}

# The shim's options (its runtime options' ConfigPath): which runsc, its state directory, and
# runsc's flags: overlay2=none as on Docker (scripts/gvisor.sh), the root filesystem's writes go
# to containerd's snapshot, not to sandbox memory.
runsc_toml() {
  cat <<EOF
# Generated by scripts/kube.sh: the runsc shim's options for the test cluster's containerd.
binary_name = "$GVISOR_BIN/runsc"
root = "$RUN/runsc"
[runsc_config]
  overlay2 = "none"
EOF
}

# The runtime handler, in containerd's CRI section (empty without gVisor). runtime_path names the
# shim, so neither containerd's PATH nor a system directory has to hold it.
gvisor_handler() {
  [ -z "$GVISOR_MISSING" ] || return 0
  cat <<EOF
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$GVISOR_HANDLER]
      runtime_type = "io.containerd.runsc.v1"
      runtime_path = "$GVISOR_SHIM"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$GVISOR_HANDLER.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$STATE/runsc.toml"
EOF
}

containerd_toml() {
  # Version 2 of the configuration: containerd 2.x migrates it as it loads it, 1.6 reads it as it is.
  cat <<EOF
# Generated by scripts/kube.sh: the test cluster's containerd, apart from the one dockerd runs.
# Binary: $CTRD
version = 2
root = "$CTR_ROOT"
state = "$CTR_STATE"
oom_score = 0

[grpc]
  address = "$CTR_SOCK"

[ttrpc]
  address = "$CTR_SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTR_ROOT/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its oom_score_adj below its parent's:
  # without this, runc fails every pod sandbox (-998) with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$RUN/runc"
        SystemdCgroup = false
$(gvisor_handler)
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
EOF
}

# Whether the files containerd reads are as this up would write them (the fast path's check).
containerd_config_current() {
  [ "$(containerd_toml)" = "$(cat "$STATE/containerd.toml" 2>/dev/null)" ] || return 1
  [ -n "$GVISOR_MISSING" ] || { [ -x "$GVISOR_SHIM" ] && [ "$(runsc_toml)" = "$(cat "$STATE/runsc.toml" 2>/dev/null)" ]; }
}

start_containerd() {
  mkdir -p "$CTR_ROOT" "$CTR_STATE"
  # The shim reads runsc.toml at each sandbox's start: a change to it needs no containerd restart.
  if [ -z "$GVISOR_MISSING" ]; then
    runsc_toml >"$STATE/runsc.toml.new"
    if cmp -s "$STATE/runsc.toml.new" "$STATE/runsc.toml"; then rm -f "$STATE/runsc.toml.new"; else mv -f "$STATE/runsc.toml.new" "$STATE/runsc.toml"; fi
  fi
  # write_config restarts a running containerd only when its file changed; the pods' shims (runc's
  # and runsc's) outlive it and it finds them again at its start.
  write_config containerd "$STATE/containerd.toml" "$STATE/containerd.toml" < <(containerd_toml)
  # Our directory first on its PATH: containerd runs the first containerd-shim-runc-v2 it finds.
  start containerd "$STATE/containerd.toml" env PATH="${CTRD_DIR:+$CTRD_DIR:}$PATH" "$CTRD" --config "$STATE/containerd.toml"
  wait_for "containerd on $CTR_SOCK" 30 containerd "$CTR" --address "$CTR_SOCK" version
}

# The pause image (harness/kube/pause, FROM scratch) and the project's images, from Docker into
# containerd's k8s.io namespace. An image is imported again when its Docker image ID changed.
import_images() {
  local t img id want have_id marker ctx missing=()
  t=$(now_ms)
  mkdir -p "$STATE/imported"
  for img in "${IMAGES[@]}"; do
    docker image inspect "$img" >/dev/null 2>&1 || missing+=("$img")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    "$SBX_ROOT/scripts/engine.sh" >&2
    "$SBX_ROOT/scripts/images.sh" >&2
  fi
  if ! docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
    ctx=$(mktemp -d)
    cp "$BIN/pause" "$SBX_ROOT/harness/kube/pause/Dockerfile" "$ctx/"
    DOCKER_BUILDKIT=0 docker build -q -t "$PAUSE_IMAGE" "$ctx" >>"$LOGS/images.log" 2>&1 ||
      { rm -rf "$ctx"; die "docker build of $PAUSE_IMAGE failed (log: $LOGS/images.log)"; }
    rm -rf "$ctx"
    # Older pause tags belong to superseded builds.
    local old
    for old in $(docker image ls sbx-kube-pause --format '{{.Tag}}'); do
      [ "sbx-kube-pause:$old" = "$PAUSE_IMAGE" ] || docker rmi "sbx-kube-pause:$old" >/dev/null 2>&1 || true
    done
  fi
  local n=0
  for img in "$PAUSE_IMAGE" "${IMAGES[@]}"; do
    want=$(docker image inspect -f '{{.Id}}' "$img") || die "no Docker image $img"
    marker=$STATE/imported/${img//[:\/]/_}
    have_id=$(cat "$marker" 2>/dev/null || true)
    if [ "$have_id" = "$want" ] && [ -n "$(ctr_ images ls -q "name==docker.io/library/$img")" ]; then
      continue
    fi
    docker save "$img" | ctr_ images import - >>"$LOGS/images.log" 2>&1 ||
      die "importing $img into containerd failed (log: $LOGS/images.log)"
    printf '%s\n' "$want" >"$marker"
    n=$((n + 1))
  done
  [ "$n" = 0 ] || note "imported $n images in $(elapsed "$t")"
}

start_etcd() {
  mkdir -p "$STATE/etcd"
  chmod 700 "$STATE/etcd"
  start etcd "$M_ETCD" "$BIN/etcd" --name "$NODE" --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NODE=http://127.0.0.1:$ETCD_PEER_PORT" \
    --quota-backend-bytes 2147483648 --log-level warn
  wait_for "etcd on 127.0.0.1:$ETCD_PORT" 30 etcd curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  start kube-apiserver "$M_API" "$BIN/kube-apiserver" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --endpoint-reconciler-type none \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --allow-privileged=false --profiling=false --anonymous-auth=false
  wait_for "kube-apiserver /readyz on $API" 60 kube-apiserver api_ready
}

start_controllers() {
  start kube-controller-manager "$M_KCM" "$BIN/kube-controller-manager" \
    --kubeconfig "$KCFG/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$KCFG/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$KCFG/controller-manager.kubeconfig" \
    --authentication-skip-lookup \
    --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --allocate-node-cidrs=false --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
  start kube-scheduler "$M_SCHED" "$BIN/kube-scheduler" \
    --kubeconfig "$KCFG/scheduler.kubeconfig" \
    --authentication-kubeconfig "$KCFG/scheduler.kubeconfig" \
    --authorization-kubeconfig "$KCFG/scheduler.kubeconfig" \
    --authentication-skip-lookup \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false
  # PVCs of StorageClass sbx-local: a directory under $PV_DIR and a `local` PV on this node each.
  start local-provisioner "$M_PROV" "$BIN/sbx-kube" local-provisioner -kubeconfig "$ADMIN_KCFG" -dir "$PV_DIR" -node "$NODE"
}

# The kubelet wants its cgroup root to exist in every hierarchy; a new v1 cpuset cgroup starts with no
# CPUs or memory nodes, so it gets its parent's.
ensure_cgroup_root() {
  local d
  if [ "$CGROUP_V1" = true ]; then
    for d in /sys/fs/cgroup/*/; do
      d=${d%/}
      [ -f "$d/cgroup.procs" ] || continue
      mkdir -p "$d$CGROUP_ROOT"
    done
    local cs=/sys/fs/cgroup/cpuset$CGROUP_ROOT
    if [ -d "$cs" ]; then
      [ -n "$(cat "$cs/cpuset.cpus")" ] || cat /sys/fs/cgroup/cpuset/cpuset.cpus >"$cs/cpuset.cpus"
      [ -n "$(cat "$cs/cpuset.mems")" ] || cat /sys/fs/cgroup/cpuset/cpuset.mems >"$cs/cpuset.mems"
    fi
  else
    mkdir -p "/sys/fs/cgroup$CGROUP_ROOT"
  fi
}

start_kubelet() {
  mkdir -p "$KUBELET_DIR"
  ensure_cgroup_root
  write_config kubelet "$STATE/kubelet.yaml" "$M_KUBELET" <<EOF
# Generated by scripts/kube.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $PKI/ca.crt }
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CTR_SOCK
imageServiceEndpoint: unix://$CTR_SOCK
# No systemd here: cgroupfs, under a root of our own.
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failCgroupV1: $([ "$CGROUP_V1" = true ] && echo false || echo true)
failSwapOn: false
# The imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
serializeImagePulls: false
maxPods: 110
podPidsLimit: 4096
resolvConf: /etc/resolv.conf
EOF
  # No iptables on the kubelet's PATH: it would otherwise add KUBE-FIREWALL to the host's INPUT and
  # OUTPUT chains (a DROP for non-loopback sources to 127.0.0.0/8, meant for kube-proxy's NodePorts,
  # which do not exist here) and canary chains to three tables. It needs none of them (the CNI plugins
  # are containerd's). mount, umount, nsenter, du and find are in /usr/bin.
  start kubelet "$M_KUBELET" env PATH=/usr/local/bin:/usr/bin:/bin "$BIN/kubelet" --config "$STATE/kubelet.yaml" \
    --kubeconfig "$KCFG/kubelet.kubeconfig" --root-dir "$KUBELET_DIR" \
    --hostname-override "$NODE" --node-ip "$NODE_IP"
}

node_ready() {
  [ "$(kubectl_admin get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# --- the least-privilege identity -------------------------------------------------------------------

ensure_rbac() {
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: { name: $NAMESPACE }
---
apiVersion: v1
kind: ServiceAccount
metadata: { name: sbx, namespace: $NAMESPACE }
automountServiceAccountToken: false
---
# What the sbx runtime uses, and nothing else (docs/kubernetes.md).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: sbx-runtime, namespace: $NAMESPACE }
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods/exec, pods/portforward]
  verbs: [get, create]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: sbx-runtime, namespace: $NAMESPACE }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: sbx-runtime }
subjects:
- { kind: ServiceAccount, name: sbx, namespace: $NAMESPACE }
---
# A long-lived token for the ServiceAccount, filled in by the controller manager.
apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: sbx-token
  namespace: $NAMESPACE
  annotations: { kubernetes.io/service-account.name: sbx }
---
# PVCs: harness/kube/provisioner.go (sbx-kube local-provisioner) makes a directory under $PV_DIR
# and a \`local\` PV pinned to the node for each claim, and deletes both once the claim is gone.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sbx-local
  annotations: { storageclass.kubernetes.io/is-default-class: "true" }
provisioner: sbx.local/hostdir
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
  local token=
  sa_token() { token=$(kubectl_admin -n "$NAMESPACE" get secret sbx-token -o 'jsonpath={.data.token}') && [ -n "$token" ]; }
  wait_for "the token of ServiceAccount $NAMESPACE/sbx" 60 kube-controller-manager sa_token
  token=$(kubectl_admin -n "$NAMESPACE" get secret sbx-token -o 'jsonpath={.data.token}' | base64 -d)
  local tmp=$SBX_KCFG.tmp
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sbx-kube
  cluster:
    server: $API
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: sbx
  user:
    token: $token
contexts:
- name: sbx@sbx-kube
  context: { cluster: sbx-kube, user: sbx, namespace: $NAMESPACE }
current-context: sbx@sbx-kube
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$SBX_KCFG"
}

# The RuntimeClass of gVisor when containerd has its handler; else none (a pod that names it is
# refused at once, "RuntimeClass not found", rather than failing at its sandbox's start).
ensure_runtime_class() {
  if [ -n "$GVISOR_MISSING" ]; then
    warn "gVisor: not offered on this cluster: $GVISOR_MISSING"
    local out
    out=$(kubectl_admin delete runtimeclass "$GVISOR_CLASS" --ignore-not-found)
    [ -z "$out" ] || note "removed RuntimeClass $GVISOR_CLASS"
    return 0
  fi
  runtime_class_current && return 0
  kubectl_admin apply -f - >/dev/null <<EOF
# Pods with runtimeClassName: $GVISOR_CLASS run in containerd's handler $GVISOR_HANDLER (runsc, scripts/kube.sh).
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: { name: $GVISOR_CLASS }
handler: $GVISOR_HANDLER
overhead: { podFixed: { memory: $GVISOR_OVERHEAD_MEMORY } }
EOF
  note "RuntimeClass $GVISOR_CLASS (handler $GVISOR_HANDLER)"
}

# Whether the RuntimeClass is as up makes it (or absent, without gVisor): one request, no kubectl.
runtime_class_current() {
  local body
  body=$(curl -s --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "$API/apis/node.k8s.io/v1/runtimeclasses/$GVISOR_CLASS") || return 1
  if [ -n "$GVISOR_MISSING" ]; then
    [[ $body == *'"reason": "NotFound"'* ]]
  else
    [[ $body == *'"handler": "'"$GVISOR_HANDLER"'"'* && $body == *'"memory": "'"$GVISOR_OVERHEAD_MEMORY"'"'* ]]
  fi
}

# A pod of sbx-base (sbx-kube-smoke), created, exec'd into and deleted as the least-privilege
# identity; with gVisor a second one of its RuntimeClass beside it, whose kernel must be gVisor's.
smoke_manifest() {
  local pod=$1 class=${2:-}
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: { name: $pod, namespace: $NAMESPACE, labels: { sbx.test: kube-smoke } }
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  terminationGracePeriodSeconds: 0${class:+
  runtimeClassName: $class}
  containers:
  - name: main
    image: sbx-base:latest
    imagePullPolicy: Never
    command: [sleep, "3600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: { drop: [ALL] }
EOF
}

smoke_test() {
  local pod=sbx-kube-smoke gpod= out t manifest
  t=$(now_ms)
  [ -n "$GVISOR_MISSING" ] || gpod=sbx-kube-smoke-gvisor
  kubectl_sbx delete pod "$pod" ${gpod:+"$gpod"} --ignore-not-found --grace-period=0 --force >/dev/null 2>&1 || true
  manifest=$(smoke_manifest "$pod")
  [ -z "$gpod" ] || manifest+=$'\n'$(smoke_manifest "$gpod" "$GVISOR_CLASS")
  # The namespace's default ServiceAccount (which admission wants) appears shortly after the namespace.
  create_pod() { printf '%s\n' "$manifest" | kubectl_sbx create -f - >/dev/null; }
  wait_for "creating pod $NAMESPACE/$pod" 30 "" create_pod
  if ! kubectl_sbx wait --for=condition=Ready "pod/$pod" --timeout=120s >/dev/null 2>&1; then
    kubectl_admin -n "$NAMESPACE" describe pod "$pod" | tail -n 20 >&2 || true
    tail -n 20 "$LOGS/kubelet.log" >&2 || true
    die "pod $NAMESPACE/$pod did not become Ready (logs: $LOGS)"
  fi
  out=$(kubectl_sbx exec "$pod" -- sh -c 'echo "exec ok as uid $(id -u)"') || die "exec into $NAMESPACE/$pod failed"
  [ "${out#exec ok}" != "$out" ] || die "exec into $NAMESPACE/$pod printed '$out'"
  [ -z "$gpod" ] || gvisor_smoke "$gpod"
  kubectl_sbx delete pod "$pod" ${gpod:+"$gpod"} --grace-period=0 --wait=true >/dev/null
  # Least privilege: what the Role does not grant is refused.
  [ "$(kubectl_sbx auth can-i get secrets -n "$NAMESPACE" 2>/dev/null)" = no ] || die "sbx can read secrets"
  [ "$(kubectl_sbx auth can-i list pods -n default 2>/dev/null)" = no ] || die "sbx can list pods outside $NAMESPACE"
  note "smoke pod ran, exec'd (${out#exec ok }) and was deleted in $(elapsed "$t")"
}

# The gVisor smoke pod: Ready, and its kernel gVisor's. A gVisor that does not work here is said
# plainly, and its RuntimeClass removed (its pods would only fail), without failing the cluster.
gvisor_smoke() {
  local pod=$1 kernel=
  if kubectl_sbx wait --for=condition=Ready "pod/$pod" --timeout=60s >/dev/null 2>&1; then
    kernel=$(kubectl_sbx exec "$pod" -- uname -r 2>&1) || true
  fi
  if [[ $kernel == *gvisor* ]]; then
    note "gVisor smoke pod ran on kernel $kernel"
    return 0
  fi
  kubectl_admin -n "$NAMESPACE" describe pod "$pod" | tail -n 8 >&2 || true
  GVISOR_MISSING="a pod of RuntimeClass $GVISOR_CLASS did not run on gVisor (uname -r: '${kernel:-no answer}'; logs: $LOGS/containerd.log)"
  ensure_runtime_class
}

# --- commands -------------------------------------------------------------------------------------

print_env() {
  cat <<EOF
SBX_KUBE_VERSION=$KUBE_VERSION
SBX_KUBE_BIN=$BIN
SBX_KUBE_ADMIN_KUBECONFIG=$ADMIN_KCFG
SBX_KUBE_NAMESPACE=$NAMESPACE
SBX_KUBE_STORAGE_CLASS=sbx-local
SBX_KUBE_CONTAINERD=$CTR_SOCK
SBX_KUBE_CONTAINERD_BIN=$CTRD
SBX_KUBE_LOGS=$LOGS
SBX_KUBE_GVISOR_RUNTIME_CLASS=$([ -n "$GVISOR_MISSING" ] || echo "$GVISOR_CLASS")
KUBECONFIG=$SBX_KCFG
EOF
}

all_alive() {
  alive etcd "$M_ETCD" && alive kube-apiserver "$M_API" &&
    alive kube-controller-manager "$M_KCM" && alive kube-scheduler "$M_SCHED" &&
    alive kubelet "$M_KUBELET" && alive containerd "$STATE/containerd.toml" && alive local-provisioner "$M_PROV"
}

# Whether the running containerd is the binary this up would start (a change of
# SBX_KUBE_CONTAINERD_VERSION, or the first up after the move off Debian's, makes it another).
containerd_current() {
  local pid
  pid=$(cat "$(pidfile containerd)" 2>/dev/null) || return 1
  [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$CTRD")" ]
}

cmd_up() {
  # Another containerd under running pods: down first (pods come back at the start below), so no
  # shim of the old one is left serving containers the new one does not know.
  if alive containerd "$STATE/containerd.toml" && ! containerd_current; then
    warn "the running containerd is not $CTRD: down, then up"
    cmd_down
  fi
  # Fast path: everything runs, the node is Ready and the kubeconfig is there.
  # A containerd configuration that changed (gVisor's handler came or went) takes the full path:
  # its start below restarts containerd.
  if [ -s "$SBX_KCFG" ] && all_alive && api_ready && node_ready && containerd_config_current && runtime_class_current; then
    # An image rebuilt since (the agent's, after a change to agent/) must reach the node too.
    hold_lock kube
    import_images
    [ -z "$GVISOR_MISSING" ] || warn "gVisor: not offered on this cluster: $GVISOR_MISSING"
    echo "kube: up, Kubernetes $KUBE_VERSION at $API ($(elapsed "$t0"))"
    print_env
    return 0
  fi
  check_host
  hold_lock kube
  ensure_packages
  ensure_binary
  ensure_containerd
  ensure_gvisor_shim
  ensure_pki
  ensure_network
  local t
  t=$(now_ms)
  start_containerd
  import_images
  start_etcd
  start_apiserver
  start_controllers
  start_kubelet
  wait_for "node $NODE Ready" "$UP_TIMEOUT_S" kubelet node_ready
  note "node Ready $(elapsed "$t") after the first start"
  ensure_rbac
  ensure_runtime_class
  smoke_test
  echo "kube: up, Kubernetes $KUBE_VERSION at $API: $(printf '%s; ' "${did[@]}" | sed 's/; $//') ($(elapsed "$t0"))"
  print_env
}

# Mount points at or under one of the given directories, deepest first.
mounts_under() {
  local mp d
  while read -r _ _ _ _ mp _; do
    mp=$(printf '%b' "${mp//\\/\\0}")
    for d in "$@"; do
      case "$mp" in "$d" | "$d"/*) printf '%s\n' "$mp" ;; esac
    done
  done </proc/self/mountinfo | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

# PIDs of containerd shims serving our containerd (their command line names our socket).
our_shims() {
  local f cmdline
  for f in /proc/[0-9]*/cmdline; do
    cmdline=$(tr '\0' ' ' <"$f" 2>/dev/null) || continue
    [[ $cmdline == *containerd-shim*" -address $CTR_SOCK "* ]] && { f=${f#/proc/}; printf '%s\n' "${f%/cmdline}"; }
  done
  return 0
}

cmd_down() {
  local purge=${1:-}
  [ "$(id -u)" = 0 ] || die "down needs root"
  hold_lock kube
  stop kube-scheduler "$M_SCHED"
  stop kube-controller-manager "$M_KCM"
  stop local-provisioner "$M_PROV"
  stop kubelet "$M_KUBELET" 30
  # The pods' processes: kill and delete every task and container of our containerd. Pods stay in
  # etcd; the next `up` starts them again (as after a node reboot).
  if alive containerd "$STATE/containerd.toml"; then
    local ids id n=0
    mapfile -t ids < <(ctr_ tasks ls -q 2>/dev/null || true)
    for id in "${ids[@]}"; do
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in "${ids[@]}"; do
      ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
      n=$((n + 1))
    done
    mapfile -t ids < <(ctr_ containers ls -q 2>/dev/null || true)
    for id in "${ids[@]}"; do
      ctr_ containers delete "$id" >/dev/null 2>&1 || true
      # libcni's result cache (a path it hard-codes): <network>-<sandbox id>-<interface>.
      rm -f /var/lib/cni/results/*-"$id"-*
    done
    [ "$n" = 0 ] || note "killed $n pod processes"
  fi
  stop kube-apiserver "$M_API"
  stop etcd "$M_ETCD"
  stop containerd "$STATE/containerd.toml"
  local pid
  for pid in $(our_shims); do
    kill -KILL "$pid" 2>/dev/null && note "killed leftover shim $pid"
  done
  # Mounts: the kubelet's (its root's shared bind mount, tokens, volumes), containerd's (rootfs, shm,
  # the pods' network namespaces, which hold their veths).
  local m n=0
  while read -r m; do
    [ -n "$m" ] || continue
    # A mount may already be gone with an earlier one (propagation lists some twice).
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || ! grep -qF " $m " /proc/self/mountinfo || warn "could not unmount $m"
    n=$((n + 1))
  done < <(mounts_under "$KUBELET_DIR" "$CTR_STATE" "$CTR_ROOT" "$RUN")
  [ "$n" = 0 ] || note "unmounted $n"
  rm -rf "$CNI_IPAM_DIR" "$RUN/runc" "$RUN/runsc"
  # containerd's state directory is ephemeral (it lives in /run); nothing is mounted there any more.
  [ -n "$(mounts_under "$CTR_STATE")" ] || rm -rf "$CTR_STATE"
  # Paths the kubelet and libcni hard-code: the device-plugin socket, the CNI result cache.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  # Network: our bridge (veths went with their namespaces) and our two FORWARD rules.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE" && note "removed bridge $BRIDGE"
  fi
  local r
  for r in "${FWD_RULES[@]}"; do
    # shellcheck disable=SC2086
    while iptables -w -C FORWARD $r 2>/dev/null; do iptables -w -D FORWARD $r; done
  done
  # What a kubelet with iptables on its PATH adds (an older kube.sh did): KUBE-FIREWALL in filter,
  # KUBE-KUBELET-CANARY in mangle, nat and filter, KUBE-IPTABLES-HINT in mangle. No other kubelet runs here.
  if [ -z "$(pids_named kubelet)" ]; then
    local ipt t c
    for ipt in iptables ip6tables; do
      have "$ipt" || continue
      while "$ipt" -w -C INPUT -j KUBE-FIREWALL 2>/dev/null; do "$ipt" -w -D INPUT -j KUBE-FIREWALL; done
      while "$ipt" -w -C OUTPUT -j KUBE-FIREWALL 2>/dev/null; do "$ipt" -w -D OUTPUT -j KUBE-FIREWALL; done
      for t in filter:KUBE-FIREWALL filter:KUBE-KUBELET-CANARY nat:KUBE-KUBELET-CANARY mangle:KUBE-KUBELET-CANARY mangle:KUBE-IPTABLES-HINT; do
        c=${t#*:}
        "$ipt" -w -t "${t%%:*}" -S "$c" >/dev/null 2>&1 || continue
        "$ipt" -w -t "${t%%:*}" -F "$c" && "$ipt" -w -t "${t%%:*}" -X "$c" && note "removed $ipt ${t%%:*} $c"
      done
    done
  fi
  # The pods' cgroups, deepest first (all empty now).
  local c
  for c in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/"${CGROUP_ROOT#/}"; do
    [ -d "$c" ] || continue
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [ "$purge" = --purge ]; then
    rm -rf "$STATE"
    note "removed $STATE"
  fi
  echo "kube: down${did[*]:+: $(printf '%s; ' "${did[@]}" | sed 's/; $//')} ($(elapsed "$t0"))"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down "${2:-}" ;;
  env) print_env ;;
  build)
    ensure_binary
    ensure_containerd
    printf '%s\n' "$BIN"
    ;;
  *) die "usage: ${0##*/} up | down [--purge] | env | build" ;;
esac
