#!/usr/bin/env bash
# The gVisor isolation tier (docs/isolation.md): builds runsc from the version harness/gvisor pins
# (Go module proxy; cached by input hash in $SBX_GVISOR_CACHE), links it at a stable path, and registers runsc with the Docker Engine as the OCI runtime `runsc`,
# with the engine's checkpoint API (experimental in Engine 20.10) on, which a memory-releasing
# pause drives. Idempotent: tens of ms when all is in place. A runtime change is a reload
# (SIGHUP); turning the checkpoint API on needs one dockerd restart, done here when needed.
# Usage: scripts/gvisor.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CACHE=${SBX_GVISOR_CACHE:-/var/cache/sbx-gvisor}
# Stable paths: the engine's configuration names these, whichever build they point at.
BIN_DIR=${SBX_GVISOR_BIN:-/usr/local/lib/sbx-gvisor}
DAEMON_JSON=${SBX_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
# --overlay2=none: the root filesystem's writes go through the gofer to the engine's overlay (not a
# sandbox-private file), so `commit`, the engine's archive API and the host see what a box wrote.
RUNSC_ARGS=(--overlay2=none)
rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

[ "$(id -u)" = 0 ] || die "registering a runtime with the engine needs root"
have go || die "go is not on PATH (runsc is built from the Go module proxy)"
t=$(now_ms)
hold_lock gvisor

hash=$(
  {
    go env GOVERSION
    cat "$SBX_ROOT/harness/gvisor/go.mod" "$SBX_ROOT/harness/gvisor/go.sum"
  } | sha256sum
)
hash=${hash:0:16}
out=$CACHE/$hash
did=()
# (The Kubernetes test cluster's containerd-shim-runsc-v1 is scripts/kube.sh's: it patches one line.)
if [ "$rebuild" = 1 ] || [ ! -x "$out/runsc" ]; then
  mkdir -p "$out"
  tmp=$out/.runsc.$$
  (cd "$SBX_ROOT/harness/gvisor" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp" gvisor.dev/gvisor/runsc) ||
    { rm -f "$tmp"; die "go build of gvisor.dev/gvisor/runsc failed"; }
  mv -f "$tmp" "$out/runsc"
  did+=("built runsc $hash")
fi
mkdir -p "$BIN_DIR"
if [ "$(readlink "$BIN_DIR/runsc" 2>/dev/null || true)" != "$out/runsc" ]; then
  ln -sfn "$out/runsc" "$BIN_DIR/runsc"
  did+=("linked $BIN_DIR/runsc")
fi

# The engine's configuration, merged: keys of the operator's own are kept.
mkdir -p "$(dirname "$DAEMON_JSON")"
args_json=$(printf '%s\n' "${RUNSC_ARGS[@]}" | node -e 'process.stdout.write(JSON.stringify(require("fs").readFileSync(0,"utf8").trim().split("\n")))')
changed=$(
  node - "$DAEMON_JSON" "$BIN_DIR/runsc" "$args_json" <<'JS'
const fs = require('node:fs');
const [file, path, args] = process.argv.slice(2);
let cfg = {};
try { cfg = JSON.parse(fs.readFileSync(file, 'utf8')); } catch (e) { if (e.code !== 'ENOENT') throw new Error(`${file}: ${e.message}`); }
const before = JSON.stringify(cfg);
cfg.experimental = true;
cfg.runtimes = { ...(cfg.runtimes ?? {}), runsc: { path, runtimeArgs: JSON.parse(args) } };
if (JSON.stringify(cfg) !== before) {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(cfg, null, 2) + '\n');
  fs.renameSync(`${file}.tmp`, file);
  process.stdout.write('yes');
}
JS
)
[ -z "$changed" ] || did+=("wrote runsc and the checkpoint API into $DAEMON_JSON")

# The running engine: a reload takes the runtime; the checkpoint API only comes with a restart.
sock=$(engine_socket)
experimental=$(curl -s --max-time 5 --unix-socket "$sock" -I http://localhost/_ping | tr -d '\r' | awk -F': ' 'tolower($1) == "docker-experimental" { print $2 }')
if [ "$experimental" != true ]; then
  [ "$sock" = /var/run/docker.sock ] || die "the engine at $sock has no checkpoint API; start it with experimental on ($DAEMON_JSON)"
  # The engine of the default socket only (a test's second engine has a dockerd of its own).
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
    while [ -e "/proc/$pid" ]; do sleep 0.2; done
  fi
  bash "$SBX_ROOT/scripts/engine.sh" >/dev/null
  did+=("restarted dockerd for its checkpoint API")
elif [ -n "$changed" ]; then
  kill -HUP "$(cat /var/run/docker.pid)"
  did+=("reloaded dockerd")
fi
runtimes() { docker info --format '{{json .Runtimes}}' 2>/dev/null || true; }
until [[ $(runtimes) == *"\"$BIN_DIR/runsc\""* ]]; do
  [ "$(($(now_ms) - t))" -lt 60000 ] || die "the engine does not list runsc at $BIN_DIR/runsc after 60s (docker info)"
  sleep 0.2
done
[ "${#did[@]}" -gt 0 ] || did+=("$hash in place")
echo "gvisor: runsc registered with the engine: $(IFS=';'; echo "${did[*]}" | sed 's/;/; /g') ($(elapsed "$t"))"
