#!/usr/bin/env bash
# The fake internet of the egress tests (issue 28): this machine has no internet, so a network
# namespace `sbx-inet` stands in for it, linked to the host by the veth sbx-inet-h ↔ sbx-inet-n on
# 198.18.0.0/24 (RFC 2544 benchmarking) and 2001:db8:5b::/64 (documentation). Boxes on Docker
# bridges reach it through the host's routing (connected route on the veth, Docker's masquerade).
# On the host: the veth's two connected routes, and for the remote-node test engines (namespaces
# behind veths sbxt<N>-h, src/testing/netns-engine.ts), whose traffic the host forwards under
# Docker's FORWARD policy DROP, two DOCKER-USER rules (comment sbx-fakenet) passing exactly
# sbxt+ -> sbx-inet-h and its replies. No sysctl, no other route or rule.
# The servers (harness/fakenet/server, run as root in the namespace):
#   198.18.0.1 ok.test, .2 other.test, .3 api.example.test, .4 deep.sub.example.test, 2001:db8:5b::1
#     v6.test: HTTP :80 and :8000, HTTPS :443 (test CA) answering `hello from <addr> host=<Host>`
#   198.18.0.7: UDP and TCP echo :7
#   169.254.169.254: a stand-in metadata service (HTTP :80, :8000; a host route to the veth)
#   198.18.0.53: DNS for the zone (udp+tcp :53); 198.18.0.54: a "foreign" resolver logging every query
# State (pid, CA, foreign log, copies of the binaries) in /run/sbx-fakenet; binaries built by
# input hash into .build/fakenet. Needs root.
# Usage: scripts/fakenet.sh up     bring it up (idempotent; replaces what a killed run left), print env
#        scripts/fakenet.sh env    print the SBX_FAKENET_* lines only (exit 1 when it is not up)
#        scripts/fakenet.sh down   stop the servers, delete namespace, veth, rules and state
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PATH=$PATH:/usr/sbin:/sbin:/usr/local/sbin

NS=sbx-inet
HOST_LINK=sbx-inet-h
NS_LINK=sbx-inet-n
HOST_ADDR=198.18.0.254
HOST_ADDR6=2001:db8:5b::fe
# In step with harness/fakenet/server/main.go and src/testing/fakenet.ts.
NS_ADDRS=(198.18.0.1 198.18.0.2 198.18.0.3 198.18.0.4 198.18.0.7 198.18.0.53 198.18.0.54)
NS_ADDR6=2001:db8:5b::1
# A stand-in for the cloud metadata service: what egress must refuse by default (host route below).
METADATA=169.254.169.254
STATE=/run/sbx-fakenet
OUT=$SBX_ROOT/.build/fakenet
SERVER=sbx-fakenet
FORWARD_RULES=(
  "-i sbxt+ -o $HOST_LINK -m comment --comment sbx-fakenet -j ACCEPT"
  "-i $HOST_LINK -o sbxt+ -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment sbx-fakenet -j ACCEPT"
)

print_env() {
  cat <<EOF
SBX_FAKENET_NETNS=$NS
SBX_FAKENET_HOST_ADDR=$HOST_ADDR
SBX_FAKENET_HOST_ADDR6=$HOST_ADDR6
SBX_FAKENET_SUBNET=198.18.0.0/24
SBX_FAKENET_SUBNET6=2001:db8:5b::/64
SBX_FAKENET_OK=198.18.0.1
SBX_FAKENET_OTHER=198.18.0.2
SBX_FAKENET_API=198.18.0.3
SBX_FAKENET_DEEP=198.18.0.4
SBX_FAKENET_ECHO=198.18.0.7
SBX_FAKENET_V6=$NS_ADDR6
SBX_FAKENET_METADATA=$METADATA
SBX_FAKENET_DNS=198.18.0.53:53
SBX_FAKENET_FOREIGN_DNS=198.18.0.54:53
SBX_FAKENET_FOREIGN_LOG=$STATE/foreign.log
SBX_FAKENET_CA=$STATE/ca.pem
SBX_FAKENET_TOOL=$STATE/nettool
SBX_FAKENET_STATE=$STATE
EOF
}

# True when $1 is a running sbx-fakenet: not a reused pid of another program, and not a zombie
# (a killed server stays one until pid 1 reaps it, which may take a while).
is_server() {
  local comm stat
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  { read -r comm <"/proc/$1/comm" && read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  [ "$comm" = "$SERVER" ] && [ "${stat:0:1}" != Z ]
}

# The server's pid when the pid file names a running one.
server_pid() {
  local pid
  pid=$(cat "$STATE/pid" 2>/dev/null) || return 1
  is_server "$pid" || return 1
  printf '%s' "$pid"
}

# Running servers: the pid file's and any other one a run that lost its pid file left (one per machine).
server_pids() {
  local pid
  for pid in $(pids_named "$SERVER"); do
    ! is_server "$pid" || printf '%s\n' "$pid"
  done
}

# forward_rules add|del. Without Docker's DOCKER-USER chain (no engine here) there is no
# DROP policy to open: nothing to do.
forward_rules() {
  local rule
  have iptables && iptables -w -S DOCKER-USER >/dev/null 2>&1 || return 0
  for rule in "${FORWARD_RULES[@]}"; do
    # shellcheck disable=SC2086 # a rule is words
    case $1 in
      add) iptables -w -C DOCKER-USER $rule 2>/dev/null || iptables -w -I DOCKER-USER $rule ;;
      del) while iptables -w -C DOCKER-USER $rule 2>/dev/null; do iptables -w -D DOCKER-USER $rule; done ;;
    esac
  done
}

inputs_hash() {
  local h
  h=$(
    {
      go env GOVERSION
      cd "$SBX_ROOT/harness/fakenet" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum
  )
  printf '%s' "${h:0:16}"
}

build() {
  local t hash name tmp
  t=$(now_ms)
  have go || die "go is not on PATH (the fake internet is built from source: harness/fakenet)"
  hash=$(inputs_hash)
  if [ "$(cat "$OUT/inputs" 2>/dev/null || true)" = "$hash" ] && [ -x "$OUT/$SERVER" ] && [ -x "$OUT/nettool" ]; then
    BUILT=$hash
    return
  fi
  mkdir -p "$OUT"
  for name in "$SERVER:server" nettool:nettool; do
    tmp=$OUT/.${name%%:*}.$$
    # GOPROXY=off: golang.org/x/net comes from the module cache; this machine has no internet.
    (cd "$SBX_ROOT/harness/fakenet" && GOPROXY=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp" "./${name#*:}") ||
      { rm -f "$tmp"; die "go build of harness/fakenet/${name#*:} failed"; }
    mv -f "$tmp" "$OUT/${name%%:*}"
  done
  printf '%s\n' "$hash" >"$OUT/inputs"
  warn "built $hash into ${OUT#"$SBX_ROOT"/} ($(elapsed "$t"))"
  BUILT=$hash
}

# True when everything is in place and answers: the namespace, the host side of the link, the
# server of these inputs alive in that namespace, and one DNS query and one HTTP connect through.
healthy() {
  local pid
  [ -e "/run/netns/$NS" ] && [ -e "/sys/class/net/$HOST_LINK" ] || return 1
  pid=$(server_pid) || return 1
  [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = "$(stat -L -c %i "/run/netns/$NS" 2>/dev/null)" ] || return 1
  [ "$(cat "$STATE/inputs" 2>/dev/null || true)" = "$1" ] || return 1
  [ -s "$STATE/ca.pem" ] && [ -x "$STATE/nettool" ] || return 1
  # Outputs captured, not piped into `grep -q`: under pipefail its early exit fails the pipe.
  [[ $(ip -o addr show dev "$HOST_LINK") == *" $HOST_ADDR/24 "* ]] || return 1
  [ -n "$(ip route show "$METADATA/32" dev "$HOST_LINK" 2>/dev/null)" ] || return 1
  probe "${2:-2s}"
}

probe() {
  [ "$("$STATE/nettool" -timeout "$1" dns 198.18.0.53:53 ok.test 2>/dev/null)" = 'A 198.18.0.1' ] &&
    "$STATE/nettool" -timeout "$1" tcp 198.18.0.1:80 >/dev/null 2>&1
}

teardown() {
  local pid i pids
  pids=$(server_pids)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086 # a list of pids
    kill $pids 2>/dev/null || true
    for i in $(seq 50); do
      for pid in $pids; do is_server "$pid" && break; pid=; done
      [ -z "$pid" ] && break
      sleep 0.1
    done
    for pid in $pids; do ! is_server "$pid" || kill -9 "$pid" 2>/dev/null || true; done
  fi
  # The link first: deleting one end deletes the pair at once, while a namespace goes (with its
  # end) only once the kernel has cleaned it up, which the next `ip link add` could race.
  if [ -e "/sys/class/net/$HOST_LINK" ]; then
    ip link del "$HOST_LINK" 2>/dev/null || [ ! -e "/sys/class/net/$HOST_LINK" ] || die "ip link del $HOST_LINK failed"
  fi
  if [ -e "/run/netns/$NS" ]; then ip netns del "$NS" || die "ip netns del $NS failed"; fi
  forward_rules del
  rm -rf "$STATE"
}

setup() {
  local a pid i
  ip netns add "$NS"
  ip link add "$HOST_LINK" type veth peer name "$NS_LINK"
  ip link set "$NS_LINK" netns "$NS"
  ip addr add "$HOST_ADDR/24" dev "$HOST_LINK"
  ip -6 addr add "$HOST_ADDR6/64" dev "$HOST_LINK" nodad
  ip link set "$HOST_LINK" up
  for a in "${NS_ADDRS[@]}"; do ip -n "$NS" addr add "$a/24" dev "$NS_LINK"; done
  ip -n "$NS" -6 addr add "$NS_ADDR6/64" dev "$NS_LINK" nodad
  ip -n "$NS" addr add "$METADATA/32" dev "$NS_LINK"
  ip -n "$NS" link set lo up
  ip -n "$NS" link set "$NS_LINK" up
  # Replies to boxes whose address Docker does not masquerade (v6, other bridges) go back via the host.
  ip -n "$NS" route add default via "$HOST_ADDR"
  ip -n "$NS" -6 route add default via "$HOST_ADDR6"
  # The metadata address is link-local: a host route, gone with the veth at `down`.
  ip route add "$METADATA/32" dev "$HOST_LINK"
  mkdir -p "$STATE"
  # Copies, so a rebuild in some worktree never swaps the binaries under a running server or a box.
  cp "$OUT/$SERVER" "$OUT/nettool" "$STATE/"
  printf '%s\n' "$BUILT" >"$STATE/inputs"
  : >"$STATE/foreign.log"
  spawn_detached "$STATE/server.log" ip netns exec "$NS" "$STATE/$SERVER" -state "$STATE"
  # The server writes its pid file once every listener is bound.
  for i in $(seq 200); do
    pid=$(server_pid) && break
    sleep 0.05
  done
  [ -n "${pid:-}" ] || { tail -n 20 "$STATE/server.log" >&2 || true; die "the fake internet's server did not start (log: $STATE/server.log)"; }
  # The pid file says every listener is bound; this proves the path from the host through the new
  # veth. Short probes, retried a few seconds rather than trusted once (the first one answered in tests).
  for i in $(seq 50); do
    probe 200ms && return
  done
  tail -n 20 "$STATE/server.log" >&2 || true
  die "the fake internet does not answer after start (log: $STATE/server.log)"
}

cmd=${1:-}
[ $# = 1 ] || cmd=
case "$cmd" in
  up)
    [ "$(id -u)" = 0 ] || die "needs root (network namespace, veth)"
    hold_lock fakenet
    t=$(now_ms)
    build
    if ! healthy "$BUILT"; then
      teardown
      setup
      healthy "$BUILT" || die "the fake internet is not in place after start (log: $STATE/server.log)"
      warn "up in $(elapsed "$t")"
    fi
    # Outside `healthy`: rules someone removed come back without restarting the servers.
    forward_rules add
    print_env
    ;;
  env)
    print_env
    server_pid >/dev/null || { warn "not up (run: ${0##*/} up)"; exit 1; }
    ;;
  down)
    [ "$(id -u)" = 0 ] || die "needs root (network namespace, veth)"
    hold_lock fakenet
    teardown
    ;;
  *) die "usage: ${0##*/} up|env|down" ;;
esac
