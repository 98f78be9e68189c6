#!/usr/bin/env bash
# `make node-tools`, after the Makefile has built the Go binaries into OUT (.tools/nodes): what the real
# nodes of `python -m sim realcluster` need besides them, each only when missing or out of date.
#   bash testbed/node-tools.sh OUT
# 1. Debian's runc, CNI plugins (bridge, host-local, portmap, loopback in /usr/lib/cni), conntrack, iptables
#    and buildah, with apt-get when missing (we run as root on Debian in CI). containerd is not Debian's
#    (1.6, which kubelet 1.37 no longer supports): the Makefile builds containerd 2 into OUT.
# 2. The test bed's images, as archives every node imports (no registry here), built with buildah from
#    scratch around one static binary each: OUT/images/pause.tar (containerd's sandbox image),
#    coredns.tar (the cluster DNS), workload.tar (the herd's slow-starting app) and startup-lock-init.tar
#    (pod-startup-lock's init client, built from its source in testbed/peers).
set -euo pipefail
out=$(realpath -m "$1")
cd "$(dirname "$0")/.."
export BUILDAH_ISOLATION=chroot

say() { echo "testbed/node-tools.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

packages=()
for pair in runc:runc conntrack:conntrack iptables:iptables buildah:buildah nsenter:util-linux; do
    command -v "${pair%%:*}" >/dev/null || packages+=("${pair#*:}")
done
for plugin in bridge host-local portmap loopback; do
    [ -x "/usr/lib/cni/$plugin" ] || { packages+=(containernetworking-plugins); break; }
done
if [ ${#packages[@]} -gt 0 ]; then
    mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
    say "installing ${packages[*]} with apt-get"
    [ "$(id -u)" -eq 0 ] || die "run as root, or install them first: apt-get install -y ${packages[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null; then
        apt-get update -q >/dev/null || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null ||
            die "apt-get install ${packages[*]} failed (see above)"
    fi
fi
# A containerd installed on the host (Debian's, say) is left alone: the nodes run OUT/containerd, each with
# its own socket and the shim built with it (sim/realcluster/node.py).

mkdir -p "$out/images"
# image NAME ARGS...: localhost/stagger-testbed/NAME:1 with OUT/NAME as its entrypoint (ARGS after it),
# running as 65532; rebuilt when the binary is newer than the archive.
image() {
    local name=$1 archive="$out/images/$1.tar" ref="localhost/stagger-testbed/$1:1" container
    shift
    [ -x "$out/$name" ] || die "$out/$name missing: build it first (make node-tools)"
    if [ -f "$archive" ] && [ "$archive" -nt "$out/$name" ]; then
        return 0
    fi
    local started=$SECONDS
    container=$(buildah from scratch)
    buildah copy --quiet "$container" "$out/$name" "/$name" >/dev/null
    local entry
    entry=$(printf '"%s",' "/$name" "$@")
    buildah config --entrypoint "[${entry%,}]" --cmd '' --user 65532:65532 \
        --label org.opencontainers.image.source=stagger/testbed "$container"
    buildah commit --quiet --rm "$container" "$ref" >/dev/null
    rm -f "$archive.tmp"
    buildah push --quiet "$ref" "docker-archive:$archive.tmp:$ref"
    mv -f "$archive.tmp" "$archive"
    say "$ref into $archive in $((SECONDS - started)) s: $(du -h "$archive" | cut -f1)"
}
image pause
image coredns
image workload
image startup-lock-init
