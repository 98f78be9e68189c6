#!/usr/bin/env bash
# Build promtool (Prometheus' rule checker and rule unit tester) from its Go module into DEST (default
# .tools/bin): `make tools` calls it. The chart's alerts are checked with it (tests/chart/test_monitoring.py).
# Idempotent: does nothing when DEST/promtool is there. Static (CGO off), stripped, -trimpath.
set -euo pipefail

DEST="${1:-.tools/bin}"
# Prometheus v3.x is published to the Go module proxy as v0.3xx.y (v0.316.0 is Prometheus 3.16.0).
VERSION="v0.316.0"

if [[ -x "$DEST/promtool" ]]; then
    exit 0
fi
mkdir -p "$DEST"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
CGO_ENABLED=0 GOBIN="$work" GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false" \
    go install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$VERSION"
mv -f "$work/promtool" "$DEST/promtool"
echo "promtool.sh: built promtool $VERSION into $DEST in $((SECONDS - start))s"
