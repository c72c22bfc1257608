#!/usr/bin/env bash
# Builds the multi-call binary (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl) and the pause binary into OUT (a directory outside the clone; scripts/kube.sh passes
# /var/cache/sbx-kube/<version>-<hash>). Static (CGO_ENABLED=0), stripped, with the version ldflags
# upstream's hack/lib/version.sh sets. The Go build cache is GOCACHE (kube.sh: /var/cache/sbx-kube/go-build).
# Usage: harness/kube/build.sh OUT
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=${1:?usage: build.sh OUT}
version=$(awk '$1 == "k8s.io/kubernetes" { print $2 } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' go.mod | head -n 1)
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes in go.mod" >&2; exit 1; }
major=${version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ld=(-s -w)
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  # No gitCommit: the module proxy serves no commit for a release (upstream omits it likewise then).
  ld+=(-X "$pkg.gitVersion=$version" -X "$pkg.gitMajor=$major" -X "$pkg.gitMinor=$minor"
    -X "$pkg.gitTreeState=archive" -X "$pkg.buildDate=$date")
done
mkdir -p "$out"
export CGO_ENABLED=0
go build -mod=readonly -buildvcs=false -trimpath -ldflags "${ld[*]}" -o "$out/sbx-kube.tmp" .
go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" -o "$out/pause" ./pause
mv -f "$out/sbx-kube.tmp" "$out/sbx-kube"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  ln -sfn sbx-kube "$out/$c"
done
echo "build.sh: $out/sbx-kube ($version)"
