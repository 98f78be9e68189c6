#!/usr/bin/env bash
# Build the Go tools the tests use from their Go modules into DEST (default .tools/bin): `make tools` calls it.
# - promtool (Prometheus' rule checker and rule unit tester): the chart's alerts (tests/chart/test_monitoring.py);
# - krew and validate-krew-manifest (krew's own manifest check, which installs the plugin as krew-index CI
#   does): `kubectl stagger`'s krew archive and manifest (tests/kubectl_plugin/test_krew.py).
# Idempotent: builds only what is missing. Static (CGO off), stripped, -trimpath.
set -euo pipefail

DEST="${1:-.tools/bin}"
# NAME MODULE@VERSION. Prometheus v3.x is published to the Go module proxy as v0.3xx.y (v0.316.0 is
# Prometheus 3.16.0).
TOOLS=(
    "promtool github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
    "krew sigs.k8s.io/krew/cmd/krew@v0.4.3"
    "validate-krew-manifest sigs.k8s.io/krew/cmd/validate-krew-manifest@v0.4.3"
)

mkdir -p "$DEST"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for tool in "${TOOLS[@]}"; do
    read -r name module <<<"$tool"
    [[ -x "$DEST/$name" ]] && continue
    start=$SECONDS
    CGO_ENABLED=0 GOBIN="$work" GOFLAGS="${GOFLAGS:--p=2} -buildvcs=false" \
        go install -trimpath -ldflags "-s -w" "$module"
    mv -f "$work/$name" "$DEST/$name"
    echo "gotools.sh: built $name ($module) into $DEST in $((SECONDS - start))s"
done
# kubectl runs `kubectl krew` as the plugin kubectl-krew on its PATH.
ln -sf krew "$DEST/kubectl-krew"
