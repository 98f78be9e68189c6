#!/usr/bin/env bash
# Builds control-plane binaries from the modules pinned in testbed/go.mod:
#   bash testbed/build.sh OUT_DIR NAME...   (NAME: a folder under testbed/cmd/)
# `make control-plane` calls it once per binary that is missing or older than its sources.
# Static (CGO off), stripped (-s -w), -trimpath, and stamped with the Kubernetes release the
# way kubernetes' hack/lib/version.sh does, so `kubectl version` shows it instead of v0.0.0.
set -euo pipefail

out=$(realpath -m "$1")
shift
cd "$(dirname "$0")"
mkdir -p "$out"

# The release and its publication time, from go.mod and the module's proxy info (not the clock,
# so two builds of one release are stamped alike).
read -r kube_version kube_date < <(go list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
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
	go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "./cmd/$name"
	mv -f "$out/$name.tmp" "$out/$name"
	echo "built $name in $((SECONDS - start))s: $(du -h "$out/$name" | cut -f1)"
done
