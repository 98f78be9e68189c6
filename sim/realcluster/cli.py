"""The `realcluster` command: a real control plane and real nodes on this machine, until SIGTERM or SIGINT.

stdout gets exactly one line, once every node is Ready and the cluster DNS answers:
    real cluster ready: 2 nodes (node-1, node-2), kubernetes v1.36.3, containerd; kubeconfig FILE
Everything else goes to stderr. Exit status: 0 after a signal (everything stopped and the host cleaned up),
1 if a part did not start or stopped (naming it, with the end of its log), 2 for a usage error, missing
binaries or not being root. `--clean DATA_DIR` undoes what a crashed run left (its record of host changes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from sim.controlplane.launcher import ControlPlaneError
from sim.realcluster.cluster import RealCluster, RealClusterError, preflight
from sim.realcluster.host import HostChanges
from sim.realcluster.node import NodeError
from sim.realcluster.plan import MAX_NODES
from sim.running import check_until, start_unless_stopped

EPILOG = """\
examples:
  python -m sim realcluster --nodes 2 --kubeconfig kc --load-image localhost/stagger:dev
      (as root, after `make image control-plane node-tools`)
  .tools/bin/kubectl --kubeconfig kc get nodes -o wide
  helm --kubeconfig kc install stagger charts/stagger --set image.repository=localhost/stagger \\
      --set image.tag=dev --set image.pullPolicy=Never
  python -m sim realcluster --clean /tmp/rc     (after a run with --data-dir /tmp/rc was killed)
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sim realcluster",
        description="Run a real Kubernetes cluster on this machine (as root): the control plane from `make "
        "control-plane` and N real nodes (containerd, kubelet, kube-proxy from `make node-tools`), each in a "
        "network namespace of its own; pods in 198.18.0.0/16 (one /24 per node), Services in 198.19.0.0/16; "
        "CoreDNS as the cluster DNS. One line on stdout once every node is Ready. SIGTERM or SIGINT stops it "
        "and leaves the host as it was (network namespaces, bridge, veths, mounts, cgroups, sysctls, files).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=2, help=f"real nodes, 1 to {MAX_NODES} (default 2)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="where to write the admin kubeconfig (default DATA_DIR/controlplane/admin.conf)",
    )
    parser.add_argument(
        "--load-image",
        action="append",
        default=[],
        metavar="IMAGE",
        help="an image to import into every node: a local image (as `make image` leaves it, e.g. "
        "localhost/stagger:dev) or an OCI or docker archive file; repeatable",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="logs, certificates, node state (default: a temporary dir, removed at exit)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the nodes and the DNS (default 120)",
    )
    parser.add_argument(
        "--clean",
        type=Path,
        metavar="DATA_DIR",
        help="undo what a killed run with this data dir left on the host, then exit",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= MAX_NODES:
        parser.error(f"--nodes must be between 1 and {MAX_NODES}")
    return args


def clean(data_dir: Path) -> int:
    changes = HostChanges.open(data_dir)
    if not changes.steps:
        print(f"nothing to clean up: no record of host changes in {data_dir}", file=sys.stderr)
        return 0
    problems = changes.undo()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


async def run(args: argparse.Namespace) -> int:
    cluster = RealCluster(
        nodes=args.nodes,
        data_dir=args.data_dir,
        kubeconfig=args.kubeconfig,
        images=args.load_image,
        ready_timeout=args.ready_timeout,
    )
    failures = (RealClusterError, ControlPlaneError, NodeError)
    started = await start_unless_stopped(cluster.start_async(), what="the cluster", cleans_up=failures)
    if started is None:  # start_async stopped what it started and undid the host changes
        return 0
    stopping, error = started
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        print(f"logs kept in {cluster.data_dir}", file=sys.stderr)
        return 1 if isinstance(error, failures) else 2
    names = ", ".join(node.plan.name for node in cluster.nodes)
    print(
        f"real cluster ready: {len(cluster.nodes)} nodes ({names}), kubernetes {cluster.control_plane.version}, "
        f"containerd; kubeconfig {cluster.kubeconfig}",
        flush=True,
    )
    print(f"started in {cluster.startup_seconds:.1f}s; logs in {cluster.data_dir}", file=sys.stderr)
    died = await check_until(stopping, cluster.check, fails=(ControlPlaneError, NodeError), every=1.0)
    if died is not None:
        print(f"error: {died}", file=sys.stderr)
    print("stopping the real cluster", file=sys.stderr)
    problems = await asyncio.to_thread(cluster.stop, keep_data=died is not None)
    for problem in problems:
        print(f"error: could not undo {problem}", file=sys.stderr)
    return 1 if problems or died is not None else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    if os.geteuid() != 0:
        print("error: real nodes need root (network namespaces, cgroups, mounts)", file=sys.stderr)
        return 2
    if args.clean is not None:
        return clean(args.clean)
    try:
        preflight()
    except RealClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return asyncio.run(run(args))
