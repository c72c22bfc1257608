#!/usr/bin/env bash
# Builds containerd, its runc shim and ctr at VERSION from the Go module proxy into OUT (a directory
# outside the clone; scripts/kube.sh passes /var/cache/sbx-kube/containerd-<version>). The test
# cluster needs a containerd that mounts image volumes (containerd >= 2.1): the pods get the in-box
# agent's binary from one (src/runtime/kubernetes/agent-delivery.ts). Debian's is 1.6.
# Static (CGO_ENABLED=0, so no btrfs or devmapper snapshotters: the cluster uses overlayfs), stripped.
# The Go build cache is GOCACHE (kube.sh: its own, removed after the build).
# Usage: harness/kube/containerd.sh OUT VERSION
set -euo pipefail
out=${1:?usage: containerd.sh OUT VERSION}
version=${2:?usage: containerd.sh OUT VERSION}
mod=github.com/containerd/containerd/v2
mkdir -p "$out"
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# `go install pkg@version` builds with containerd's own go.mod and go.sum (checked against the sum database).
GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath \
  -tags "no_btrfs no_devmapper no_zfs" \
  -ldflags "-s -w -X $mod/version.Version=$version -X $mod/version.Package=$mod" \
  "$mod/cmd/containerd@$version" "$mod/cmd/containerd-shim-runc-v2@$version" "$mod/cmd/ctr@$version"
for b in containerd containerd-shim-runc-v2 ctr; do
  mv -f "$tmp/$b" "$out/$b"
done
echo "containerd.sh: $out ($("$out/containerd" --version))"
