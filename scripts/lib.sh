# shellcheck shell=bash
# Shared helpers for the harness scripts; sourced, never run.

SBX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SBX_ROOT

die() {
  printf '%s: error: %s\n' "${0##*/}" "$*" >&2
  exit 1
}

warn() {
  printf '%s: %s\n' "${0##*/}" "$*" >&2
}

# EPOCHREALTIME avoids forking `date` on the fast paths that must stay well under a second.
now_ms() {
  local t=${EPOCHREALTIME/[.,]/}
  printf '%s' "$((t / 1000))"
}

elapsed() {
  local ms=$(($(now_ms) - $1))
  printf '%d.%03ds' "$((ms / 1000))" "$((ms % 1000))"
}

have() {
  command -v "$1" >/dev/null 2>&1
}

# Prints the unix socket path the engine is expected on, or nothing when DOCKER_HOST points elsewhere.
engine_socket() {
  local host=${DOCKER_HOST:-unix:///var/run/docker.sock}
  case "$host" in
    unix://*) printf '%s' "${host#unix://}" ;;
    *) ;;
  esac
}

# True when the engine answers /_ping. curl is used for sockets because `docker version` costs ~100 ms;
# tcp:// and ssh:// hosts may need TLS or ssh config, which only the docker CLI knows.
engine_ping() {
  local sock
  sock=$(engine_socket)
  if [ -n "$sock" ] && have curl; then
    [ -S "$sock" ] || return 1
    [ "$(curl -s --max-time 2 --unix-socket "$sock" http://localhost/_ping 2>/dev/null)" = OK ]
  else
    timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
  fi
}

# http_status URL [curl args...]: the HTTP status code, or 000 when nothing answers.
http_status() {
  local url=$1
  shift
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" 2>/dev/null || true
}

# Runs a program in its own session with no tie to our fds, so it outlives the script and holds
# neither an output pipe of whoever ran us (CI would wait on it) nor the hold_lock fd.
spawn_detached() {
  local log=$1 fd
  shift
  mkdir -p "$(dirname "$log")"
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -le 2 ] || eval "exec $fd>&-"
    done 2>/dev/null
    exec setsid -f "$@" >>"$log" 2>&1 </dev/null
  )
}

# PIDs of processes whose command name is exactly $1 (pgrep is in procps, which may be missing).
pids_named() {
  local f comm
  for f in /proc/[0-9]*/comm; do
    { read -r comm <"$f"; } 2>/dev/null || continue
    [ "$comm" = "$1" ] && { f=${f#/proc/}; printf '%s\n' "${f%/comm}"; }
  done
  return 0
}

# Serializes harness steps that parallel runs (two `npm test`s on one machine) would race: two
# dockerds, two registries on one port, builds pruning each other's tags. Held until the script exits.
hold_lock() {
  local file=${TMPDIR:-/tmp}/sbx-harness-$1.lock
  [ "${SBX_LOCK_HELD:-}" != "$file" ] || return 0
  SBX_LOCK_HELD=$file
  exec 9>>"$file"
  flock -w 300 9 || die "waited 300s for $file"
}

# Packages of "$@" that dpkg does not report as installed. dpkg-query rather than `command -v`,
# because Debian's dynamic `busybox` package also provides /bin/busybox and cannot go into a scratch image.
missing_packages() {
  local name state p
  local -A ok=()
  if ! have dpkg-query; then
    printf '%s\n' "$@"
    return
  fi
  while read -r name state; do
    [ "$state" = ii ] && ok[$name]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)
  for p in "$@"; do
    [ -n "${ok[$p]:-}" ] || printf '%s\n' "$p"
  done
}

# Installs packages with apt (root only) and records it in the caller's `did` list.
apt_install() {
  if [ "$(id -u)" != 0 ] || ! have apt-get; then
    die "missing packages: $*. Install them (Debian: apt-get install $*) or run this script as root."
  fi
  local policy=/usr/sbin/policy-rc.d
  # Without this, the postinst scripts start Debian's own dockerd, containerd and a registry on
  # :5000 through their init scripts, which would race ours and take registry.sh's port.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    # shellcheck disable=SC2064 # $policy is local, so it must expand now
    trap "rm -f '$policy'" EXIT
  fi
  local log=${SBX_APT_LOG:-/var/log/sbx-apt.log}
  local t apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300)
  t=$(now_ms)
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    "${apt[@]}" update >>"$log" 2>&1 || { tail -n 20 "$log" >&2; die "apt-get update failed (log: $log)"; }
  fi
  # A stale package list fails the install with 404s; only then is a refresh worth its time.
  if ! "${apt[@]}" install "$@" >>"$log" 2>&1; then
    if ! { "${apt[@]}" update && "${apt[@]}" install "$@"; } >>"$log" 2>&1; then
      tail -n 20 "$log" >&2
      die "apt-get install $* failed (log: $log)"
    fi
  fi
  did+=("installed $* in $(elapsed "$t")")
}

# Builds the Go main package in $SBX_ROOT/$1 as static binaries for linux/amd64 and linux/arm64,
# .build/$1/$2-linux-<arch>. Cached by input hash (the Go version and the package's sources:
# Go, assembly, go.mod, go.sum; tests and testprogs/ left out), so an unchanged tree costs one
# hash. Each binary is written to a temp name and renamed: a build never leaves half a binary,
# and a process running the old one keeps it. $3: 1 to build even when cached.
build_static_go() {
  local dir=$1 bin=$2 rebuild=$3 out=$SBX_ROOT/.build/$1 arches=(amd64 arm64) t hash arch tmp cached=1 sizes=""
  have go || die "go is not on PATH ($bin is built from source)"
  t=$(now_ms)
  hold_lock "$dir"
  hash=$(
    {
      go env GOVERSION
      cd "$SBX_ROOT/$dir" && find . -path ./testprogs -prune -o -type f \( -name '*.go' -o -name '*.s' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum
  )
  hash=${hash:0:16}
  [ "$rebuild" = 0 ] || cached=0
  [ "$(cat "$out/inputs" 2>/dev/null || true)" = "$hash" ] || cached=0
  for arch in "${arches[@]}"; do
    [ -x "$out/$bin-linux-$arch" ] || cached=0
  done
  if [ "$cached" = 1 ]; then
    echo "$dir: $hash cached in ${out#"$SBX_ROOT"/} ($(elapsed "$t"))"
    return 0
  fi
  mkdir -p "$out"
  for arch in "${arches[@]}"; do
    tmp=$out/.$bin-linux-$arch.$$
    (cd "$SBX_ROOT/$dir" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp" .) ||
      { rm -f "$tmp"; die "go build of $bin for linux/$arch failed"; }
    mv -f "$tmp" "$out/$bin-linux-$arch"
    sizes+="$arch $(stat -c %s "$out/$bin-linux-$arch") bytes; "
  done
  printf '%s\n' "$hash" >"$out/inputs"
  echo "$dir: $hash built in ${out#"$SBX_ROOT"/} (${sizes%; }) ($(elapsed "$t"))"
}
