#!/usr/bin/env bash
# `make image-test`: runs the built image's processes from inside it, as its unprivileged user, and checks
#   - lockd (standalone, as if on 2 cores, the built-in policy): /healthz answers 200; two pods ask for a
#     slot: 200 for the first, 423 for the second (one slot: 0.5 per core);
#   - the init client's --help answers within 1 s; the controller's --help; the evict mode's idle stub
#     (`python -m webhook.idle`) runs and exits 0 on SIGTERM;
#   - `python` is the venv's; sim, tests, pip and setuptools are not importable;
# then prints the image size. A failing check exits non-zero with the check's message.
# Without a Docker engine: `buildah run --isolation chroot` in a working container of the image (its
# network is the machine's, so lockd and its client both run in the same `buildah run`).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/stagger:dev}
export BUILDAH_ISOLATION=chroot

die() { echo "docker/image-test.sh: FAILED: $*" >&2; exit 1; }
command -v buildah >/dev/null || die "buildah missing: run \`make image\` first (it installs it)"
buildah inspect --type image "$IMAGE" >/dev/null 2>&1 || die "no image $IMAGE: run \`make image\` first"

ctr=$(buildah from --pull-never "$IMAGE")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT

# Everything is checked by one Python program run by the image's `python` (the first on the image's PATH).
read -r -d '' CHECKS <<'PY' || true
import importlib.util, json, os, signal, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

failed = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failed.append(what)


def run(*args, timeout=20.0):
    started = time.monotonic()
    p = subprocess.run(["python", "-m", *args], capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - started


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


check(sys.prefix == "/opt/stagger" and os.getuid() == 65532, f"python is the venv's ({sys.prefix}), uid {os.getuid()} (65532)")
for name in ("sim", "tests", "pip", "setuptools"):
    check(importlib.util.find_spec(name) is None, f"{name} is not importable in the image")

p, took = run("initclient", "--help")
check(p.returncode == 0 and "usage" in p.stdout and took < 1.0, f"python -m initclient --help: exit {p.returncode} in {took:.2f} s (< 1 s)")
p, took = run("webhook", "--help")
check(p.returncode == 0 and "usage" in p.stdout, f"python -m webhook --help: exit {p.returncode} in {took:.2f} s")
p, took = run("lockd", "--help")
check(p.returncode == 0 and "usage" in p.stdout, f"python -m lockd --help: exit {p.returncode} in {took:.2f} s")

idle = subprocess.Popen(["python", "-m", "webhook.idle"])
time.sleep(0.5)
alive = idle.poll() is None
idle.send_signal(signal.SIGTERM)
try:
    code = idle.wait(timeout=5)
except subprocess.TimeoutExpired:
    idle.kill()
    code = "none within 5 s"
check(alive and code == 0, f"python -m webhook.idle idles, exits {code} on SIGTERM (0)")

# lockd on a free port; the load is read from a file (0% busy) so that a busy machine's CPU does not
# turn the first answer into a 423: the built-in policy's slot count is what is checked.
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
load = os.path.join(tempfile.mkdtemp(), "load.json")
with open(load, "w") as f:
    json.dump({"cpuPercent": 0, "ioPercent": 0}, f)
base = f"http://127.0.0.1:{port}"
lockd = subprocess.Popen(
    ["python", "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}", "--cores", "2", "--load-file", load],
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
)
try:
    status, deadline = None, time.monotonic() + 15
    while time.monotonic() < deadline and lockd.poll() is None:
        try:
            status, _ = get(base + "/healthz")
            break
        except OSError:
            time.sleep(0.1)
    check(status == 200, f"lockd serves /healthz: {status}")
    if status == 200:
        a, body_a = get(base + "/v1/lock?namespace=default&name=a")
        b, body_b = get(base + "/v1/lock?namespace=default&name=b")
        check(a == 200, f"GET /v1/lock name=a: {a} (200) {body_a.strip()[:120]}")
        check(b == 423, f"GET /v1/lock name=b: {b} (423) {body_b.strip()[:120]}")
        # What the chart's `helm test` runs, from this image.
        p, took = run("kubectl_stagger", "selftest", "--lockd-url", base)
        check(p.returncode == 0 and "ok  lockd" in p.stdout, f"kubectl_stagger selftest: exit {p.returncode} {p.stdout.strip()[:120]}")
finally:
    lockd.terminate()
    try:
        out, _ = lockd.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        lockd.kill()
        out, _ = lockd.communicate()
    if failed:
        print("lockd's output:\n" + out, flush=True)
    check(lockd.returncode == 0, f"lockd exits {lockd.returncode} on SIGTERM (0)")

sys.exit(f"{len(failed)} check(s) failed: {failed}" if failed else 0)
PY

echo "docker/image-test.sh: checking $IMAGE from inside it (buildah run --isolation chroot, as its user)"
buildah run --isolation chroot --user 65532:65532 "$ctr" -- python -c "$CHECKS" || die "checks inside $IMAGE (above)"
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
entrypoint=$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$IMAGE")
[ "$user" = "65532:65532" ] || die "image user is '$user', not 65532:65532"
[ "$entrypoint" = '[python -m]' ] || die "image entrypoint is $entrypoint, not [\"python\", \"-m\"]"
echo "ok    user $user, entrypoint $entrypoint"
echo "docker/image-test.sh: all checks passed; $IMAGE is $(buildah images --format '{{.Size}}' "$IMAGE" | head -n1)"
