#!/usr/bin/env bash
# Builds the static busybox of sbx-base into .build/busybox/busybox: Debian's busybox source (the
# version of the host's busybox-static), Debian's patches and static config, and on top of that
# config the options in images/sbx-base/busybox.config. Debian's own binary cannot be shipped as
# it is: its config leaves FEATURE_WGET_TIMEOUT off while wget still parses -T into a pointer that
# option left NULL, so `wget -T 5 URL` dies of SIGSEGV before it connects.
# Cached by input hash (source version, options, this script, compiler, libc): a cached run costs
# three quick calls and a hash (30-140 ms). The build is reproducible (SOURCE_DATE_EPOCH from the
# source's changelog, which is also the binary's mtime; paths mapped to "."), so every checkout gets
# the same file and images.sh the same sbx-base tag. Cold: the source from Debian's archive
# (~2.5 MB, ~1 s) and 45-140 s of gcc on two cores.
# Usage: scripts/busybox.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$SBX_ROOT/.build/busybox
OPTIONS=$SBX_ROOT/images/sbx-base/busybox.config
rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

t=$(now_ms)
hold_lock busybox

for tool in dpkg-query dpkg-source dpkg-buildflags dpkg-parsechangelog apt-get gcc make; do
  have "$tool" || die "$tool is missing: run scripts/engine.sh (it installs busybox-static, dpkg-dev, gcc and libc6-dev)"
done
# The source package and version of the host's busybox-static (a binNMU's "+b1" is not in the source's).
version=$(dpkg-query -W -f='${source:Version}' busybox-static 2>/dev/null) ||
  die "busybox-static is not installed: run scripts/engine.sh"
hash=$(
  {
    printf 'busybox %s\n' "$version"
    gcc -dumpfullversion
    dpkg-query -W -f='${Version}\n' libc6-dev
    cat "$OPTIONS" "${BASH_SOURCE[0]}" | sha256sum
  } | sha256sum
)
hash=${hash:0:16}

if [ "$rebuild" = 0 ] && [ -x "$OUT/busybox" ] && [ "$(cat "$OUT/inputs" 2>/dev/null || true)" = "$hash" ]; then
  echo "busybox: $hash cached in ${OUT#"$SBX_ROOT"/} ($(elapsed "$t"))"
  exit 0
fi

# The build directory, under the lock (the previous build's is left only by a kill).
work=$OUT/work
rm -rf "$work"
mkdir -p "$work"
# shellcheck disable=SC2064 # work must expand now
trap "rm -rf '$work'" EXIT
log=$OUT/build.log
: >"$log"

# The source through apt, from the archives the host already uses: their entries turned into
# deb-src in a private apt state, so the host's own lists and sources stay as they are.
mkdir -p "$work/apt/lists/partial" "$work/apt/parts"
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/${f##*/}"
done
{ grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
  sed -E 's/^deb([[:space:]])/deb-src\1/' >"$work/apt/sources.list"
apt=(apt-get -q -o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/parts"
  -o "Dir::State::Lists=$work/apt/lists" -o APT::Sandbox::User=root)
if ! { "${apt[@]}" update && (cd "$work" && "${apt[@]}" source --download-only "busybox=$version"); } >>"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "could not fetch Debian's busybox source $version (log: $log)"
fi
dpkg-source -x "$work"/busybox_*.dsc "$work/src" >>"$log" 2>&1 || die "dpkg-source -x failed (log: $log)"

src=$work/src
# Debian's static flavour, then each option of ours in place of Debian's line for it.
cat "$src/debian/config/os/linux" "$src/debian/config/pkg/static" >"$src/.config"
while read -r line; do
  case $line in '' | '#'*) continue ;; esac
  name=${line%%=*}
  sed -i -E "/^(# )?$name[= ]/d" "$src/.config"
  printf '%s\n' "$line" >>"$src/.config"
done <"$OPTIONS"
export KCONFIG_NOTIMESTAMP=1 SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(cd "$src" && dpkg-parsechangelog -STimestamp)
(cd "$src" && { yes "" || true; } | make silentoldconfig) >>"$log" 2>&1 || die "busybox's make silentoldconfig failed (log: $log)"
# An option that Kconfig dropped (misspelt, or its dependency is off) must not pass unnoticed.
while read -r line; do
  case $line in '' | '#'*) continue ;; esac
  grep -qxF "$line" "$src/.config" || die "busybox's config did not keep $line (see $OPTIONS)"
done <"$OPTIONS"

# Debian's flags (hardening) without -O2, so busybox's own -Os applies, as debian/rules does. Asked
# in the source directory, whose path their -ffile-prefix-map then maps to ".": the binary does
# not depend on where the checkout is.
cflags=$(cd "$src" && echo "$(dpkg-buildflags --get CFLAGS | sed 's/-O2//') $(dpkg-buildflags --get CPPFLAGS)")
ldflags=$(cd "$src" && echo "$(dpkg-buildflags --get CFLAGS | sed 's/-O2//') $(dpkg-buildflags --get LDFLAGS)")
if ! (cd "$src" && make -j"$(nproc)" busybox BB_EXTRA_VERSION="Debian $version, sbx build" \
  CONFIG_EXTRA_CFLAGS="$cflags" CONFIG_EXTRA_LDFLAGS="$ldflags") >>"$log" 2>&1; then
  tail -n 25 "$log" >&2
  die "busybox build failed (log: $log)"
fi
"$src/busybox" true || die "the built busybox does not run"
touch -d "@$SOURCE_DATE_EPOCH" "$src/busybox"
mv -f "$src/busybox" "$OUT/busybox"
printf '%s\n' "$hash" >"$OUT/inputs"
echo "busybox: $hash built in ${OUT#"$SBX_ROOT"/} ($version, $(stat -c %s "$OUT/busybox") bytes) ($(elapsed "$t"))"
