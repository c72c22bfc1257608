#!/usr/bin/env bash
# What `npm test` runs: a real engine, the local images and registries, then every *.test.ts under
# src/ and test/ with node:test's TAP reporter, then a check that no test left a container behind.
# Usage: scripts/test.sh [node --test options as --name=value] [test files...]
#   npm test -- src/runtime/docker/runtime.test.ts
#   npm test -- --test-name-pattern=exec src/runtime/docker/runtime.test.ts
# A missing engine fails the run; nothing here skips.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SBX_ROOT"

t0=$(now_ms)
# As YYYYMMDDhhmmss (UTC, like the engine's Created), a second early so this run's first second counts.
run_started=$(date -u -d @"$(($(date +%s) - 1))" +%Y%m%d%H%M%S)

bash scripts/engine.sh || die "no Docker Engine (scripts/engine.sh failed): the tests need a real one"
bash scripts/gvisor.sh || die "registering gVisor (runsc) with the engine failed (scripts/gvisor.sh)"
bash scripts/images.sh || die "building the test images failed (scripts/images.sh)"
bash scripts/agent.sh || die "building the in-box agent failed (scripts/agent.sh)"
npx tsx scripts/console-build.ts || die "building the web console failed (scripts/console-build.ts)"
bash scripts/registry.sh || die "starting the test registries failed (scripts/registry.sh)"

export SBX_TEST_IMAGE=sbx-test:latest
export SBX_BASE_IMAGE=sbx-base:latest
export SBX_TEST_REGISTRY=127.0.0.1:5000
export SBX_TEST_REGISTRY_AUTH=127.0.0.1:5001
export SBX_TEST_REGISTRY_USER=sbx
export SBX_TEST_REGISTRY_PASS=sbx-test-pass
export SBX_TEST_PULL_IMAGE=127.0.0.1:5000/sbx/pulltest:latest
# engine.sh installed Debian's chromium: the browser tests must run, never skip.
export SBX_REQUIRE_BROWSER=1
# The API document's tests (src/server/openapi.test.ts) validate it and fuzz a server with schemathesis: never skipped here.
SBX_PYTOOLS_BIN=$(bash scripts/pytools.sh) || die "installing schemathesis and openapi-spec-validator failed (scripts/pytools.sh)"
export SBX_PYTOOLS_BIN SBX_REQUIRE_SCHEMATHESIS=1
# e2b's Python SDK, two versions, for src/server/e2b/python.test.ts: never skipped here.
SBX_E2B_PYTHON_BINS=$(bash scripts/e2b-python.sh | paste -sd:) || die "installing the e2b Python SDK failed (scripts/e2b-python.sh)"
export SBX_E2B_PYTHON_BINS SBX_REQUIRE_E2B_PYTHON=1

opts=()
files=()
for arg in "$@"; do
  case "$arg" in
    -*) opts+=("$arg") ;;
    *) files+=("$arg") ;;
  esac
done
if [ "${#files[@]}" -eq 0 ]; then
  # node 20's --test expands no globs, and its default search would not find .ts files.
  mapfile -t files < <(find src test -type f -name '*.test.ts' 2>/dev/null | LC_ALL=C sort)
fi

# The Kubernetes test cluster (scripts/kube.sh, docs/kubernetes.md) for the whole suite or any file of
# the Kubernetes runtime: a fresh machine builds it once (7-16 min), later runs start it in seconds.
# Exported, so a cluster that does not come up fails those tests instead of skipping them.
kube_wanted=0
for f in "${files[@]}"; do case "$f" in *src/runtime/kubernetes/* | *kubernetes*.test.ts) kube_wanted=1 ;; esac; done
if [ "$kube_wanted" = 1 ] && [ -z "${SBX_TEST_KUBECONFIG:-}" ]; then
  kube_out=$(bash scripts/kube.sh up) || die "the Kubernetes test cluster did not come up (scripts/kube.sh up; logs in /var/log/sbx-kube)"
  export SBX_TEST_KUBECONFIG=${kube_out##*KUBECONFIG=}
  kube_env=$(bash scripts/kube.sh env)
  kubectl_bin=$(sed -n 's/^SBX_KUBE_BIN=//p' <<<"$kube_env")/kubectl
  kube_admin=$(sed -n 's/^SBX_KUBE_ADMIN_KUBECONFIG=//p' <<<"$kube_env")
  kube_ns=$(sed -n 's/^SBX_KUBE_NAMESPACE=//p' <<<"$kube_env")
fi

rc=0
if [ "${#files[@]}" -eq 0 ]; then
  echo "test.sh: no *.test.ts files under src/ or test/"
else
  # *.serial.test.ts change what every box on the engine sees (the host firewall's chains, a box
  # bridge filled to its limit, the kernel's next pid): they run after the others, one at a time,
  # with nothing beside them.
  parallel=() serial=()
  for f in "${files[@]}"; do case "$f" in *.serial.test.ts) serial+=("$f") ;; *) parallel+=("$f") ;; esac; done
  echo "test.sh: ${#parallel[@]} file(s) at concurrency ${SBX_TEST_CONCURRENCY:-3}, then ${#serial[@]} alone; setup took $(elapsed "$t0")"
  # --test-timeout bounds each file in node 20, so a hung test fails the run instead of stalling CI.
  # The TAP stream is kept as well, so the run can end with its failures: a CI log is often read
  # from its tail, and 20,000 lines of TAP bury the one `not ok`.
  tap_log=$(mktemp "${TMPDIR:-/tmp}/sbx-test.XXXXXX.tap")
  run_tests() {
    node --import tsx --test --test-reporter=tap --test-concurrency="$1" \
      --test-timeout="${SBX_TEST_TIMEOUT_MS:-600000}" "${opts[@]}" "${@:2}" | tee -a "$tap_log" || rc=${PIPESTATUS[0]}
  }
  [ "${#parallel[@]}" -eq 0 ] || run_tests "${SBX_TEST_CONCURRENCY:-3}" "${parallel[@]}"
  [ "${#serial[@]}" -eq 0 ] || run_tests 1 "${serial[@]}"
fi

# Containers the tests made directly carry sbx.test; boxes made through a Manager carry sbx.managed-by.
test_containers() {
  # A benchmark on the same engine is not this run's leak; nor is the engine's egress helper
  # (src/runtime/docker/egress.ts), made once per engine by whichever test needs it first.
  { docker ps -aq --no-trunc --filter label=sbx.test; docker ps -aq --no-trunc --filter label=sbx.managed-by; } | sort -u |
    comm -23 - <({ docker ps -aq --no-trunc --filter label=sbx.label.bench; docker ps -aq --no-trunc --filter label=sbx.role=egress; } | sort -u)
}

# Only containers created since this run started count: on a shared engine, older ones belong to
# earlier runs or to someone else, and are not this run's to remove.
leaked=()
while read -r id created; do
  [ -n "$id" ] || continue
  created=${created:0:19}
  created=${created//[^0-9]/}
  [ "$((10#$created))" -lt "$run_started" ] || leaked+=("$id")
done < <(test_containers | xargs -r docker inspect -f '{{.Id}} {{.Created}}')
if [ "${#leaked[@]}" -gt 0 ]; then
  {
    echo "test.sh: leaked containers (label sbx.test or sbx.managed-by) left by this run, now removed:"
    docker inspect -f '  {{slice .Id 0 12}} {{.Name}} {{.Config.Image}} {{.State.Status}} sbx.test={{index .Config.Labels "sbx.test"}}' "${leaked[@]}"
  } >&2
  docker rm -f "${leaked[@]}" >/dev/null
  [ "$rc" -ne 0 ] || rc=1
  echo "test.sh: FAIL: leaked containers" >&2
fi
# The test namespace is the tests' alone: every pod (boxes, workspace helpers) or claim left is a leak.
if [ -n "${kubectl_bin:-}" ]; then
  pods=$("$kubectl_bin" --kubeconfig "$kube_admin" -n "$kube_ns" get pods,persistentvolumeclaims -o name 2>&1) || {
    echo "test.sh: FAIL: cannot list the test cluster's pods: $pods" >&2
    rc=1
    pods=
  }
  if [ -n "$pods" ]; then
    echo "test.sh: leaked pods or claims in namespace $kube_ns, now removed:" $pods >&2
    # shellcheck disable=SC2086 # one name per word
    "$kubectl_bin" --kubeconfig "$kube_admin" -n "$kube_ns" delete --grace-period=0 --force $pods >/dev/null 2>&1 || true
    [ "$rc" -ne 0 ] || rc=1
    echo "test.sh: FAIL: leaked pods or claims" >&2
  fi
fi
# Network namespace engines (src/testing/netns-engine.ts) that a test left up, or an earlier killed
# run: their dockerds, veths and namespaces end with the suite; the image caches stay for the next run.
netns_left=$(bash scripts/netns-engines.sh down all 2>&1) || {
  echo "test.sh: FAIL: scripts/netns-engines.sh down all: $netns_left" >&2
  rc=1
}
[ -z "$netns_left" ] || echo "test.sh: network namespace engines were left up, now stopped: $netns_left" >&2
older=$(test_containers | wc -l)
[ "$older" -eq 0 ] || warn "$older older sbx.test/sbx.managed-by container(s) remain from other runs: docker rm -f \$(docker ps -aq --filter label=sbx.test)"

if [ -n "${tap_log:-}" ]; then
  if grep -q '^ *not ok ' "$tap_log"; then
    echo "test.sh: the failed tests, with what they said (whole TAP output: $tap_log):"
    awk -f scripts/tap-failures.awk "$tap_log"
  else
    rm -f "$tap_log"
  fi
fi
echo "test.sh: exit $rc after $(elapsed "$t0")"
exit "$rc"
