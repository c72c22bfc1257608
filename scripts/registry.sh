#!/usr/bin/env bash
# Two local registries for pull tests, run from Debian's docker-registry binary (not its init script):
#   127.0.0.1:5000  no auth
#   127.0.0.1:5001  htpasswd auth, user sbx / password sbx-test-pass
# and sbx/pulltest:latest (sbx-base plus a marker file) pushed to both. Idempotent: registries that
# already answer are reused.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t0=$(now_ms)
if [ "$(id -u)" = 0 ]; then
  STATE=${SBX_REGISTRY_STATE:-/var/lib/sbx-test-registry}
else
  STATE=${SBX_REGISTRY_STATE:-$SBX_ROOT/.build/registry}
fi
OPEN=127.0.0.1:5000
AUTH=127.0.0.1:5001
USER_NAME=sbx
PASSWORD=sbx-test-pass
REPO=sbx/pulltest:latest
START_TIMEOUT_S=20

have docker-registry || die "docker-registry is not installed (scripts/engine.sh installs it)"
have htpasswd || die "htpasswd is not installed (scripts/engine.sh installs apache2-utils)"
docker image inspect sbx-base:latest >/dev/null 2>&1 || die "sbx-base:latest is missing (run scripts/images.sh)"
mkdir -p "$STATE"
hold_lock registry

did=()

# ensure_registry ADDR EXPECTED_STATUS [auth]
ensure_registry() {
  local addr=$1 want=$2 auth=${3:-} dir=$STATE/${1##*:} status
  status=$(http_status "http://$addr/v2/")
  if [ "$status" = "$want" ]; then
    return
  fi
  [ "$status" = 000 ] || die "$addr answers /v2/ with HTTP $status, not $want: something else holds the port"

  mkdir -p "$dir/data"
  local auth_yaml=
  if [ -n "$auth" ]; then
    htpasswd -Bbn "$USER_NAME" "$PASSWORD" >"$dir/htpasswd" 2>/dev/null
    auth_yaml=$(printf 'auth:\n  htpasswd:\n    realm: sbx-test\n    path: %s\n' "$dir/htpasswd")
  fi
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: $addr
$auth_yaml
EOF
  local log=$dir/registry.log pidfile=$dir/registry.pid t log_start=0
  [ -f "$log" ] && log_start=$(stat -c %s "$log")
  t=$(now_ms)
  rm -f "$pidfile"
  # The wrapper records the registry's own pid, which `setsid -f` would not tell us.
  # shellcheck disable=SC2016 # $$ and $0 belong to the inner sh
  spawn_detached "$log" sh -c 'echo $$ >"$0"; exec docker-registry serve "$1"' "$pidfile" "$dir/config.yml"
  local deadline=$(($(now_ms) + START_TIMEOUT_S * 1000)) pid
  until [ "$(http_status "http://$addr/v2/")" = "$want" ]; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if { [ -n "$pid" ] && [ ! -d "/proc/$pid" ]; } || [ "$(now_ms)" -ge "$deadline" ]; then
      tail -c +"$((log_start + 1))" "$log" | tail -n 20 >&2
      die "registry on $addr did not come up (log above, full log: $log)"
    fi
    sleep 0.1
  done
  did+=("started $addr in $(elapsed "$t")")
}

ensure_registry "$OPEN" 200
ensure_registry "$AUTH" 401 auth

# publish REGISTRY [docker CLI args...]: builds REGISTRY/sbx/pulltest:latest as sbx-base plus one
# small layer unique to that registry, with no other local tag, so a test that removes the ref
# removes that layer too and its pull downloads it again; then pushes it (~60 ms when the registry
# has the layers, and a test may have removed or replaced the local ref).
publish() {
  local ref=$1/$REPO log=$STATE/publish-${1##*:}.log
  shift
  : >"$log"
  local current old_id
  current=$(docker image inspect -f '{{.Id}} {{index .Config.Labels "sbx.pulltest.base"}}' "$ref" 2>/dev/null || true)
  if [ "${current#* }" != "$base_id" ]; then
    old_id=${current%% *}
    local ctx
    ctx=$(mktemp -d "${TMPDIR:-/tmp}/sbx-pulltest.XXXXXX")
    printf 'sbx pull test image for %s\n' "$ref" >"$ctx/sbx-pulltest"
    printf 'FROM sbx-base:latest\nCOPY sbx-pulltest /etc/sbx-pulltest\n' >"$ctx/Dockerfile"
    if ! DOCKER_BUILDKIT=0 docker build --label "sbx.pulltest.base=$base_id" -t "$ref" "$ctx" >>"$log" 2>&1; then
      rm -rf "$ctx"
      cat "$log" >&2
      die "building $ref failed"
    fi
    rm -rf "$ctx"
    # The superseded build would linger as a dangling image.
    [ -z "$old_id" ] || docker rmi "$old_id" >/dev/null 2>&1 || true
    did+=("built $ref")
  fi
  docker "$@" push "$ref" >>"$log" 2>&1 || { cat "$log" >&2; die "docker push $ref failed"; }
}

base_id=$(docker image inspect -f '{{.Id}}' sbx-base:latest)
t=$(now_ms)
publish "$OPEN"
# A private client config keeps the test password out of the user's ~/.docker/config.json.
client_config=$STATE/docker-config
mkdir -p "$client_config"
printf '%s' "$PASSWORD" | docker --config "$client_config" login -u "$USER_NAME" --password-stdin "$AUTH" \
  >"$STATE/login.log" 2>&1 || { cat "$STATE/login.log" >&2; die "docker login $AUTH failed"; }
publish "$AUTH" --config "$client_config"
did+=("pushed $REPO to both in $(elapsed "$t")")

summary=$(printf '%s; ' "${did[@]}")
echo "registry: $OPEN (open) and $AUTH (user $USER_NAME) serve $REPO: ${summary%; } ($(elapsed "$t0"))"
