#!/usr/bin/env bash
# Builds the stagger image without a Docker engine, with buildah (`make image`, docs in docker/README.md).
#   docker/build.sh base    the local base image (Debian minbase with python3 and python3-venv), when missing
#   docker/build.sh image   the base when missing, then docker/Dockerfile on it
# No registry image can be pulled here, so the base is made with debootstrap from the Debian mirror that
# apt on this machine already uses (read from apt's sources; DEBIAN_MIRROR=URL overrides it).
# Environment: IMAGE (localhost/stagger:dev), BASE_IMAGE (localhost/stagger-base:bookworm), SUITE (bookworm),
# REBUILD_BASE=1 makes the base again even when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/stagger:dev}
SUITE=${SUITE:-bookworm}
BASE_IMAGE=${BASE_IMAGE:-localhost/stagger-base:$SUITE}
# Everything a RUN step or a `buildah run` does here is chroot-isolated: the sandbox we run in refuses
# the namespaces and rlimits that buildah's default (OCI runtime) isolation needs.
export BUILDAH_ISOLATION=chroot

say() { echo "docker/build.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# buildah and debootstrap from apt when missing (we run as root on Debian in CI).
need_tools() {
    local missing=() tool
    for tool in buildah debootstrap; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} with apt-get"
    command -v apt-get >/dev/null || die "${missing[*]} missing and no apt-get here: install them by hand (Debian/Ubuntu: apt-get install buildah debootstrap)"
    [ "$(id -u)" -eq 0 ] || die "${missing[*]} missing: run as root, or install them first: sudo apt-get install -y buildah debootstrap"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; then
        apt-get update -q >/dev/null || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
            die "apt-get install ${missing[*]} failed (see apt's messages above): install them by hand"
    fi
}

# The Debian archive that apt on this machine uses: the first URIs (deb822 .sources) or `deb` line
# (sources.list) that is not the security archive.
host_mirror() {
    local uri=""
    if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
        uri=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
            /etc/apt/sources.list.d/*.sources)
    fi
    if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { if ($i !~ /security/) print $i; break } }' \
            /etc/apt/sources.list | head -n1)
    fi
    printf '%s' "$uri"
}

# Not needed to build or run the image: apt and the libraries only it (or e2fsprogs) uses. Checked against
# the rest of the minbase package set: nothing left depends on these.
PURGE="apt libapt-pkg6.0 gpgv debian-archive-keyring e2fsprogs libext2fs2 logsave libss2 libstdc++6
 libgnutls30 libhogweed6 libnettle8 libtasn1-6 libp11-kit0 libidn2-0 libunistring2 libxxhash0 libseccomp2"

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

build_base() {
    if image_exists "$BASE_IMAGE" && [ "${REBUILD_BASE:-0}" != 1 ]; then
        say "base $BASE_IMAGE exists (REBUILD_BASE=1 makes it again)"
        return 0
    fi
    local mirror=${DEBIAN_MIRROR:-$(host_mirror)}
    [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list: set DEBIAN_MIRROR=URL"
    local work rootfs started=$SECONDS
    work=$(mktemp -d /tmp/stagger-base.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    rootfs=$work/rootfs
    say "debootstrap $SUITE (minbase, python3, python3-venv, ca-certificates) from apt's mirror"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$rootfs" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    # No package manager beyond dpkg in the image (nothing is installed into it later; dpkg's database
    # stays, for scanners): apt and what only apt and e2fsprogs use. Then what no container needs:
    # downloaded packages, package lists, glibc's iconv modules (Python does its own encodings), docs (their
    # copyright files stay), man and info pages, translations.
    chroot "$rootfs" dpkg --purge --force-remove-essential --force-depends $PURGE >>"$work/debootstrap.log" 2>&1 ||
        { tail -n 30 "$work/debootstrap.log" >&2; die "dpkg --purge in the base failed"; }
    find "$rootfs"/usr/lib -maxdepth 2 -type d -name gconv -exec rm -rf {} +
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/debconf/*-old \
        "$rootfs"/var/log/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/usr/share/lintian "$rootfs"/usr/share/linda "$rootfs"/etc/apt
    find "$rootfs"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
    find "$rootfs"/usr/share/doc -mindepth 1 -type d -empty -delete
    local ctr mnt
    ctr=$(buildah from scratch)
    mnt=$(buildah mount "$ctr")
    tar -C "$rootfs" -cf - --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' . |
        tar -C "$mnt" -xpf - --numeric-owner
    buildah umount "$ctr" >/dev/null
    buildah config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash \
        --label org.opencontainers.image.description="Debian $SUITE minbase with python3 and python3-venv (stagger's local base)" "$ctr"
    buildah commit --rm -q "$ctr" "$BASE_IMAGE" >/dev/null
    say "base $BASE_IMAGE built in $((SECONDS - started)) s"
}

# pip's settings on this machine (index, CA bundle) go into the build as build arguments and a secret,
# so that pip inside the build reaches the index the way pip here does; the repository names none.
pip_build_args() {
    local cert=${PIP_CERT:-} conf
    if [ -z "$cert" ]; then
        for conf in ${PIP_CONFIG_FILE:-} /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
            [ -r "$conf" ] || continue
            cert=$(awk -F= '$1 ~ /^[ \t]*cert[ \t]*$/ { gsub(/^[ \t]+|[ \t]+$/, "", $2); print $2 }' "$conf" | tail -n1)
            [ -n "$cert" ] && break
        done
    fi
    [ -n "$cert" ] && [ -r "$cert" ] && printf '%s\n' --secret "id=pip-cert,src=$cert"
    local index=${PIP_INDEX_URL:-}
    [ -n "$index" ] && printf '%s\n' --build-arg "PIP_INDEX_URL=$index"
    local extra=${PIP_EXTRA_INDEX_URL:-}
    [ -n "$extra" ] && printf '%s\n' --build-arg "PIP_EXTRA_INDEX_URL=$extra"
    return 0
}

build_image() {
    build_base
    local started=$SECONDS args=()
    mapfile -t args < <(pip_build_args)
    say "buildah bud docker/Dockerfile -> $IMAGE"
    buildah bud --isolation chroot --layers --build-arg "BASE=$BASE_IMAGE" "${args[@]}" \
        --ignorefile docker/Dockerfile.dockerignore -f docker/Dockerfile -t "$IMAGE" .
    say "$IMAGE built in $((SECONDS - started)) s: $(buildah images --format '{{.Size}}' "$IMAGE" | head -n1)"
}

need_tools
case "${1:-image}" in
    base) build_base ;;
    image) build_image ;;
    *) die "usage: docker/build.sh [base|image]" ;;
esac
