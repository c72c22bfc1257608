#!/usr/bin/env bash
# Builds the local images from images/<name>/ (no registry is reachable, so nothing is pulled):
# each is tagged sbx-<name>:<hash> and sbx-<name>:latest, where <hash> covers the definition files,
# the host files copied into the build context (images/<name>/host-files.sh lists them) and the
# parent's hash. A hash tag that already exists is reused, so an unchanged image costs one `docker` call.
# Usage: scripts/images.sh [--rebuild]   (--rebuild: build again without the layer cache)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Parents before children: "name:parent".
IMAGES=(sbx-base: sbx-test:sbx-base sbx-desktop:sbx-base sbx-e2b: sbx-agent: sbx-egress:)
LOG_DIR=$SBX_ROOT/.build/images
# Without the buildx plugin (as here) the CLI falls back to the legacy builder anyway; saying so
# makes a machine that has buildx build the same way.
export DOCKER_BUILDKIT=0

rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

# Two runs at once would build twice and prune each other's fresh tags.
hold_lock images

declare -A image_id=() hash_of=()
# One listing up front instead of an inspect per image keeps the cached path fast.
while read -r repo tag id; do
  image_id[$repo:$tag]=$id
done < <(docker image ls --format '{{.Repository}} {{.Tag}} {{.ID}}')

# Identity of a host file or directory: content hashes for small files, name+size+mtime for big
# ones (hashing the ~100 MB node binary would cost more than the whole cached run). Paths are
# relative to the source, so two checkouts of one commit share their image tags.
host_identity() {
  local dir=$1 base=.
  [ -d "$1" ] || { dir=$(dirname "$1") base=$(basename "$1"); }
  (
    cd "$dir"
    find -L "$base" -type f -size -1024k -print0 | sort -z | xargs -0r sha256sum
    find -L "$base" -type f -size +1023k -printf '%p %s %T@\n' | sort
  )
}

build_image() {
  local name=$1 parent=$2 def=$SBX_ROOT/images/$1 t
  t=$(now_ms)
  [ -f "$def/Dockerfile" ] || die "$def/Dockerfile is missing"
  local -a host=()
  local listed
  if [ -f "$def/host-files.sh" ]; then
    listed=$(bash "$def/host-files.sh") || die "$def/host-files.sh failed"
    [ -n "$listed" ] || die "$def/host-files.sh listed nothing"
    mapfile -t host <<<"$listed"
  fi

  local hash entry src sum path
  # The small host files hashed in one sha256sum call up front (sbx-desktop lists ~90 libraries;
  # a host_identity per file cost a second per cached run), printed as host_identity would.
  local -A small_sum=()
  local -a sources=()
  for entry in "${host[@]}"; do
    src=${entry%%$'\t'*}
    [ -e "$src" ] || die "$name needs host file $src"
    [ -d "$src" ] || sources+=("$src")
  done
  if [ "${#sources[@]}" -gt 0 ]; then
    while read -r sum path; do
      small_sum[$path]=$sum
    done < <(find -L "${sources[@]}" -maxdepth 0 -type f -size -1024k -print0 | xargs -0r sha256sum)
  fi
  hash=$(
    {
      (cd "$def" && find . -type f -printf '%p %m\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
      for entry in "${host[@]}"; do
        src=${entry%%$'\t'*}
        printf '%s\n' "${entry#*$'\t'}"
        if [ -n "${small_sum[$src]:-}" ]; then
          printf '%s  %s\n' "${small_sum[$src]}" "${src##*/}"
        else
          host_identity "$src"
        fi
      done
      [ -z "$parent" ] || printf 'parent %s\n' "${hash_of[$parent]}"
    } | sha256sum
  )
  hash=${hash:0:12}
  hash_of[$name]=$hash
  local ref=$name:$hash

  if [ "$rebuild" = 0 ] && [ -n "${image_id[$ref]:-}" ]; then
    if [ "${image_id[$name:latest]:-}" != "${image_id[$ref]}" ]; then
      docker tag "$ref" "$name:latest"
    fi
    echo "images: $ref cached, tagged $name:latest ($(elapsed "$t"))"
    return
  fi

  local ctx log=$LOG_DIR/$name.log
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/sbx-image-$name.XXXXXX")
  # shellcheck disable=SC2064 # ctx is local, so it must expand now
  trap "rm -rf '$ctx'" EXIT
  cp -a "$def/." "$ctx/"
  rm -f "$ctx/host-files.sh"
  for entry in "${host[@]}"; do
    src=${entry%%$'\t'*}
    mkdir -p "$(dirname "$ctx/${entry#*$'\t'}")"
    cp -RL "$src" "$ctx/${entry#*$'\t'}"
  done
  mkdir -p "$LOG_DIR"
  local -a args=(--label "sbx.image=$name" --label "sbx.image.hash=$hash" -t "$ref" -t "$name:latest")
  [ -z "$parent" ] || args+=(--build-arg "BASE=$parent:${hash_of[$parent]}")
  [ "$rebuild" = 0 ] || args+=(--no-cache)
  if ! docker build "${args[@]}" "$ctx" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    die "docker build of $ref failed (log: $log)"
  fi
  rm -rf "$ctx"
  trap - EXIT

  # Superseded hash tags only pile up; an image a container still uses stays (rmi refuses).
  local key old=()
  for key in "${!image_id[@]}"; do
    [[ $key == "$name":* && $key != "$name:latest" && $key != "$ref" ]] && old+=("$key")
  done
  [ "${#old[@]}" -eq 0 ] || docker rmi "${old[@]}" >/dev/null 2>&1 || true
  echo "images: $ref built, tagged $name:latest ($(elapsed "$t"), log $log)"
}

for spec in "${IMAGES[@]}"; do
  build_image "${spec%%:*}" "${spec#*:}"
done
