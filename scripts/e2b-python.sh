#!/usr/bin/env bash
# The PyPI `e2b` SDK that the Python compatibility test runs against a real `sbx serve`
# (src/server/e2b/python.test.ts): one venv per SDK version, the newest we test and an older 2.x,
# each with pytest and pytest-asyncio. Pinned, installed from PyPI into .build/e2b-python-<key>,
# keyed by the pins and the Python version: an unchanged key costs one test for a file.
# Prints each venv's bin dir, one a line, newest SDK first.
# Usage: scripts/e2b-python.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# 2.63.0: the newest on PyPI when this was written. 2.20.3, the last 2.20: it still creates and
# connects through the older routes (POST /sandboxes, /sandboxes/:id/connect; 2.63 uses /v2), maps
# envd's 502 to TimeoutException (no SandboxNotRunningException yet), and sends no E2b-Sandbox-Id
# after Sandbox.connect: the oldest behaviour of each that sbx serves.
SDKS=(e2b==2.63.0 e2b==2.20.3)
TOOLS=(pytest==8.4.2 pytest-asyncio==1.2.0)
have python3 || die "python3 is not on PATH (the e2b Python SDK's tests need it)"
t=$(now_ms)
hold_lock e2b-python

# venv_for SDK: the venv's path for that SDK pin (keyed by it, the tools and the Python version).
venv_for() {
  local key
  key=$({ python3 --version; printf '%s\n' "$1" "${TOOLS[@]}"; } | sha256sum)
  printf '%s' "$SBX_ROOT/.build/e2b-python-${key:0:12}"
}

install_venv() {
  local venv=$1 sdk=$2
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$sdk" "${TOOLS[@]}" >&2 || die "pip install $sdk ${TOOLS[*]} failed"
  touch "$venv/.complete"
}

# The missing venvs install side by side (pip mostly waits on the network).
pids=() installed=()
for sdk in "${SDKS[@]}"; do
  venv=$(venv_for "$sdk")
  [ -x "$venv/bin/pytest" ] && [ -f "$venv/.complete" ] && continue
  install_venv "$venv" "$sdk" &
  pids+=("$!")
  installed+=("$sdk")
done
for pid in "${pids[@]}"; do wait "$pid" || die "installing the e2b Python SDK failed"; done

if [ "${#installed[@]}" -eq 0 ]; then
  echo "e2b-python: ${SDKS[*]} cached in .build ($(elapsed "$t"))" >&2
else
  echo "e2b-python: ${installed[*]} (with ${TOOLS[*]}) installed in .build ($(elapsed "$t"))" >&2
fi
for sdk in "${SDKS[@]}"; do printf '%s\n' "$(venv_for "$sdk")/bin"; done
