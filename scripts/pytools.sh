#!/usr/bin/env bash
# The Python tools the API document's test runs (src/server/openapi.test.ts): schemathesis, the
# property-based API fuzzer, and openapi-spec-validator, the reference validator of OpenAPI 3.0/3.1
# documents. Pinned, installed from PyPI into a venv under .build/pytools-<key>, keyed by the pins
# and the Python version: an unchanged key costs one test for a file. Prints the venv's bin dir.
# Usage: scripts/pytools.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PINS=(schemathesis==4.32.5 openapi-spec-validator==0.9.0)
have python3 || die "python3 is not on PATH (the API document's tests run schemathesis and openapi-spec-validator)"
t=$(now_ms)
key=$({ python3 --version; printf '%s\n' "${PINS[@]}"; } | sha256sum)
venv=$SBX_ROOT/.build/pytools-${key:0:12}
hold_lock pytools
if [ -x "$venv/bin/schemathesis" ] && [ -x "$venv/bin/openapi-spec-validator" ] && [ -f "$venv/.complete" ]; then
  echo "pytools: cached in ${venv#"$SBX_ROOT"/} ($(elapsed "$t"))" >&2
  printf '%s\n' "$venv/bin"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}" >&2 || die "pip install ${PINS[*]} failed"
touch "$venv/.complete"
echo "pytools: ${PINS[*]} installed in ${venv#"$SBX_ROOT"/} ($(elapsed "$t"))" >&2
printf '%s\n' "$venv/bin"
