#!/usr/bin/env bash
# Builds control-plane binaries from the modules pinned in testbed/go.mod, or in an alternate module file
# beside it for another Kubernetes minor (Go's -modfile flag; its .sum beside it is used):
#   bash testbed/build.sh [--modfile go.1.34.mod] OUT_DIR NAME...   (NAME: a folder under testbed/cmd/)
# `make control-plane` calls it once per binary that is missing or older than its sources
# (`make control-plane KUBE_VERSION=1.34` with --modfile go.1.34.mod).
# Static (CGO off), stripped (-s -w), -trimpath, and stamped with the Kubernetes release the
# way kubernetes' hack/lib/version.sh does, so `kubectl version` shows it instead of v0.0.0.
set -euo pipefail

modfile=go.mod
if [ "${1:-}" = --modfile ]; then
	modfile=$2
	shift 2
fi
out=$(realpath -m "$1")
shift
cd "$(dirname "$0")"
mkdir -p "$out"
[ -f "$modfile" ] || { echo "testbed/build.sh: no testbed/$modfile" >&2; exit 2; }

# The release and its publication time, from the module file used and the module's proxy info (not the
# clock, so two builds of one release are stamped alike).
read -r kube_version kube_date < <(go list -modfile="$modfile" -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
major=${kube_version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.buildDate=$kube_date -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
done

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false"
for name in "$@"; do
	echo "building $name ($kube_version) into $out/$name"
	start=$SECONDS
	go build -modfile="$modfile" -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "./cmd/$name"
	mv -f "$out/$name.tmp" "$out/$name"
	echo "built $name in $((SECONDS - start))s: $(du -h "$out/$name" | cut -f1)"
done
