"""The command line: `kubectl stagger {check-policy,convert,status,why,selftest}` (installed as the
`kubectl-stagger` console script, which kubectl runs for `kubectl stagger`). The flags are parsed once into
`Settings`; each command returns its exit code, and a `Problem` is printed as one line on stderr."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, cast

from kubectl_stagger import checkpolicy, explain, pods, report, tables
from kubectl_stagger.cluster import Cluster, kubeconfig_path, open_cluster
from kubectl_stagger.convert import (
    PEERS,
    Input,
    InvalidInput,
    OutputDoesNotLoad,
    Peer,
    UnknownFormat,
    convert_inputs,
)
from kubectl_stagger.problems import ExitCode, Problem
from kubectl_stagger.selftest import run_checks
from kubectl_stagger.tables import OutputFormat

__all__ = ["Settings", "main", "parse_settings", "run"]

logger = logging.getLogger(__name__)

EXIT_CODES = """exit codes:
  0  done (check-policy: the file is valid)
  1  check-policy: the file is not valid (every error on stderr, in lockd's words); convert: a file cannot
     be read, or is a peer's configuration that the peer would refuse too (every error on stderr)
  2  bad command line
  3  no usable kubeconfig, the API server cannot be reached, or it refused the request
  4  stagger is not installed where we looked (no controller or lockd pods: -n, --release, -l)
  5  why: no such pod
  6  selftest: a check failed
  7  convert: the input is none of the formats it reads (straggler, pod-pacemaker, thundering-herd-scheduler,
     pod-startup-lock)
"""

EXAMPLES = """examples:
  kubectl stagger check-policy charts/stagger/configs/_policies.yaml
  kubectl stagger convert straggler-policies.yaml pacemakerconfigs.yaml > policies.yaml
  kubectl stagger convert --from pod-startup-lock lock-args.txt   # what it cannot carry over: on stderr
  kubectl stagger status                      # the chart installed in namespace "stagger"
  kubectl stagger status -n stagger-system --release stagger -o yaml
  kubectl stagger why web-7f9c-abcde -n shop
  kubectl stagger selftest --webhook-url https://stagger-controller.stagger.svc --ca-file ca.crt \\
      --lockd-url http://$HOST_IP:9400        # what `helm test` runs in the cluster
"""


@dataclass(frozen=True)
class Settings:
    command: str
    output: OutputFormat = "table"
    policy_file: Path | None = None
    pod: str = ""
    pod_namespace: str = "default"
    namespace: str = "stagger"
    release: str | None = None
    selector: str | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    timeout: float = 10.0
    verbose: bool = False
    webhook_url: str | None = None
    ca_file: Path | None = None
    lockd_url: str | None = None
    inputs: tuple[Path, ...] = ()
    from_peer: Peer | None = None


def _cluster_flags(parser: argparse.ArgumentParser, *namespace_flags: str) -> None:
    """The flags of a command that reads the cluster: where stagger is installed (`namespace_flags`, as
    the command names them), which of its pods, and how to reach the API server."""
    parser.add_argument(
        *namespace_flags,
        dest="namespace",
        default="stagger",
        help="where stagger is installed (default: stagger)",
    )
    parser.add_argument("--release", help="only this Helm release's pods (app.kubernetes.io/instance)")
    parser.add_argument("-l", "--selector", help="more labels stagger's pods must have (a label selector)")
    parser.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG, else ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    parser.add_argument("--request-timeout", dest="timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")


def _subcommand(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    """One command, its help ending with the exit codes."""
    return commands.add_parser(
        name, help=help_text, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl stagger",
        description="Look into stagger: validate a policy file, see every group and node, ask why a pod waits.",
        epilog=EXAMPLES + "\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is asked of the API server")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = _subcommand(
        commands, "check-policy", "validate a policy file offline, with lockd's own loader and messages"
    )
    check.add_argument("policy_file", type=Path, metavar="FILE")
    convert = _subcommand(
        commands,
        "convert",
        "print the stagger policy file a peer's configuration means (straggler, pod-pacemaker, "
        "thundering-herd-scheduler, pod-startup-lock), and on stderr what it cannot carry over",
    )
    convert.add_argument("inputs", type=Path, nargs="+", metavar="FILE", help="a file, or - for stdin")
    convert.add_argument(
        "--from",
        dest="from_peer",
        choices=PEERS,
        help="the peer that wrote the files (default: from their content)",
    )
    status = _subcommand(
        commands, "status", "every staggering group and every node's lockd, read through the API server"
    )
    _cluster_flags(status, "-n", "--namespace")
    why = _subcommand(
        commands,
        "why",
        "why a pod waits or waited: its groups, its node's queue and lockd's reason, its Events",
    )
    why.add_argument("pod", metavar="POD")
    why.add_argument("-n", "--namespace", dest="pod_namespace", default="default", help="the pod's namespace")
    _cluster_flags(why, "--stagger-namespace")
    selftest = _subcommand(
        commands,
        "selftest",
        "does an installation answer where its callers reach it (the chart's `helm test` runs this)",
    )
    selftest.add_argument("--webhook-url", help="the controller's Service, e.g. https://NAME.NAMESPACE.svc")
    selftest.add_argument("--ca-file", type=Path, help="the CA the webhook's certificate is checked with")
    selftest.add_argument(
        "--lockd-url", help="a node's lockd as init clients reach it, e.g. http://HOST_IP:9400"
    )
    selftest.add_argument("--request-timeout", dest="timeout", type=float, default=10.0, metavar="SECONDS")
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    return Settings(
        command=args.command,
        output=cast(OutputFormat, getattr(args, "output", "table")),
        policy_file=getattr(args, "policy_file", None),
        pod=getattr(args, "pod", ""),
        pod_namespace=getattr(args, "pod_namespace", "default"),
        namespace=getattr(args, "namespace", "stagger"),
        release=getattr(args, "release", None),
        selector=getattr(args, "selector", None),
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        timeout=getattr(args, "timeout", 10.0),
        verbose=args.verbose,
        webhook_url=getattr(args, "webhook_url", None),
        ca_file=getattr(args, "ca_file", None),
        lockd_url=getattr(args, "lockd_url", None),
        inputs=tuple(getattr(args, "inputs", ())),
        from_peer=getattr(args, "from_peer", None),
    )


def check_policy(settings: Settings, *, out: TextIO, err: TextIO) -> ExitCode:
    assert settings.policy_file is not None
    verdict = checkpolicy.check_policy_file(path=settings.policy_file)
    if not verdict.valid:
        for line in verdict.errors:
            print(line, file=err)
        return ExitCode.INVALID_POLICY
    for line in checkpolicy.note_lines(verdict):
        print(line, file=err)
    print(checkpolicy.summary(verdict), file=out)
    return ExitCode.OK


# A peer's configuration is a few kilobytes; more is not one (the policy file's own limit is 256 KiB).
MAX_INPUT_BYTES = 1024 * 1024


def _read_input(path: Path) -> Input:
    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            with path.open("rb") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise Problem(f"{path}: cannot read it: {reason}", code=ExitCode.INVALID_POLICY) from error
    if len(text) > MAX_INPUT_BYTES:
        raise Problem(
            f"{path}: larger than {MAX_INPUT_BYTES // 1024} KiB: refused", code=ExitCode.INVALID_POLICY
        )
    return Input(source="<stdin>" if str(path) == "-" else str(path), text=text)


def convert(settings: Settings, *, out: TextIO, err: TextIO) -> ExitCode:
    """The policy file on `out`; on `err` one line for each thing not carried over, then the notes."""
    inputs = [_read_input(path) for path in settings.inputs]
    try:
        converted = convert_inputs(inputs, peer=settings.from_peer)
    except UnknownFormat as error:
        raise Problem(str(error), code=ExitCode.UNKNOWN_FORMAT) from error
    except InvalidInput as error:
        for line in error.errors:
            print(line, file=err)
        return ExitCode.INVALID_POLICY
    except OutputDoesNotLoad as error:
        raise Problem(
            f"the converted policy file does not load (a bug in convert, please report it): {error}",
            code=ExitCode.INVALID_POLICY,
        ) from error
    for line in converted.not_carried:
        print(f"not carried over: {line}", file=err)
    for line in converted.notes:
        print(f"note: {line}", file=err)
    out.write(converted.text)
    return ExitCode.OK


def _cluster(settings: Settings) -> AbstractAsyncContextManager[Cluster]:
    """The API server as the command's flags name it: --kubeconfig (else $KUBECONFIG, else
    ~/.kube/config), --context and --request-timeout."""
    return open_cluster(
        kubeconfig=kubeconfig_path(explicit=settings.kubeconfig),
        context=settings.context,
        request_timeout=settings.timeout,
    )


async def _status_report(settings: Settings) -> dict[str, object]:
    async with _cluster(settings) as cluster:
        found = {
            component: await cluster.list_pods(
                namespace=settings.namespace,
                selector=pods.selector_for(component, release=settings.release, selector=settings.selector),
            )
            for component in ("controller", "lockd")
        }
        if not found["controller"] and not found["lockd"]:
            raise Problem(
                f"no stagger controller or lockd pods in namespace {settings.namespace!r}"
                + (f" (release {settings.release!r})" if settings.release else "")
                + (f" (selector {settings.selector!r})" if settings.selector else "")
                + ": is stagger installed there? (-n NAMESPACE, --release, -l)",
                code=ExitCode.NOT_INSTALLED,
            )
        controller = await cluster.controller_status(found["controller"])
        lockds = await cluster.lockd_statuses(found["lockd"])
    return report.status_report(controller=controller, lockds=lockds)


def status(settings: Settings, *, out: TextIO, err: TextIO) -> ExitCode:
    document = asyncio.run(_status_report(settings))
    if settings.output != "table":
        out.write(tables.dump(document, output=settings.output))
        return ExitCode.OK
    out.write(render_status(document))
    return ExitCode.OK


def render_status(document: dict[str, object]) -> str:
    controller = cast(dict[str, object] | None, document.get("controller"))
    lines: list[str] = []
    if controller is None:
        lines.append("controller: no controller pods found (lockd alone: node throttles only)")
    elif "error" in controller:
        lines.append(f"controller {controller['pod']}: no answer: {controller['error']}")
    else:
        pacing = "granting" if controller.get("granting") else "not granting (not the leader, or not synced)"
        lines.append(f"controller {controller['pod']}: {pacing}")
        if controller.get("groupsOff"):
            lines.append(f"  groups off: {controller['groupsOff']}")
        if controller.get("policyReloadError"):
            lines.append(
                f"  policy reload FAILED, the last good policy stays: {controller['policyReloadError']}"
            )
    groups = report.group_rows(document)
    lines.append("")
    lines.append(tables.render_table(report.GROUP_HEADERS, groups).rstrip() if groups else "no groups")
    nodes = report.node_rows(document)
    lines.append("")
    lines.append(tables.render_table(report.NODE_HEADERS, nodes).rstrip() if nodes else "no lockd pods found")
    return "\n".join(lines) + "\n"


async def _why_explanation(settings: Settings) -> dict[str, object]:
    async with _cluster(settings) as cluster:
        pod = await cluster.get_pod(namespace=settings.pod_namespace, name=settings.pod)
        if pod is None:
            raise Problem(
                f"pod {settings.pod_namespace}/{settings.pod} not found", code=ExitCode.POD_NOT_FOUND
            )
        events = await cluster.events_of(pod)

        def selector(component: str) -> str:
            return pods.selector_for(component, release=settings.release, selector=settings.selector)

        controllers = await cluster.list_pods(namespace=settings.namespace, selector=selector("controller"))
        controller = await cluster.controller_status(controllers)
        node = pods.node_of(pod)
        lockd_pods = await cluster.list_pods(namespace=settings.namespace, selector=selector("lockd"))
        on_node = [each for each in lockd_pods if node and pods.node_of(each) == node]
        lockd = await cluster.status_of(on_node[0], component="lockd") if on_node else None
    found = explain.explanation(pod=pod, events=events, controller=controller, lockd=lockd)
    if not controllers and not lockd_pods:
        found["note"] = (
            f"no stagger controller or lockd pods in namespace {settings.namespace!r} (--stagger-namespace)"
        )
    return found


def why(settings: Settings, *, out: TextIO, err: TextIO) -> ExitCode:
    found = asyncio.run(_why_explanation(settings))
    out.write(tables.dump(found, output=settings.output) if settings.output != "table" else render_why(found))
    return ExitCode.OK


def _section(title: str, headers: Sequence[str], rows: list[list[str]]) -> list[str]:
    return ["", title, tables.render_table(headers, rows).rstrip() if rows else "  (none)"]


def render_why(found: dict[str, object]) -> str:
    state = "Ready" if found.get("ready") else "not Ready"
    lines = [
        f"pod {found['pod']} on {found.get('node') or '(no node yet)'}: {found.get('phase')}, {state}",
        f"why: {found['verdict']}",
    ]
    if found.get("note"):
        lines.append(f"note: {found['note']}")
    marks = cast(dict[str, str], found.get("stagger") or {})
    lines += ["", "STAGGER LABELS AND ANNOTATIONS"] + (
        [f"  {k}: {v}" for k, v in marks.items()] or ["  (none)"]
    )
    lines += _section("GROUPS", report.GROUP_HEADERS, explain.group_rows(found))
    at_node = cast(dict[str, object] | None, found.get("atNode"))
    if at_node is not None:
        lines += [
            "",
            f"LOCKD {at_node['lockd']}: {at_node.get('error') or str(at_node.get('waiting')) + ' waiting'}",
        ]
    for each in cast(list[dict[str, object]], found.get("initContainers") or []):
        lines.append(
            f"init container {each['name']}: {each['state']}"
            + (f": {each['message']}" if "message" in each else "")
        )
    lines += _section("CONDITIONS", explain.CONDITION_HEADERS, explain.condition_rows(found))
    lines += _section("EVENTS", explain.EVENT_HEADERS, explain.event_rows(found))
    return "\n".join(lines) + "\n"


def selftest(settings: Settings, *, out: TextIO, err: TextIO) -> ExitCode:
    if settings.webhook_url is None and settings.lockd_url is None:
        raise Problem(
            "selftest: nothing to check: give --webhook-url, --lockd-url or both", code=ExitCode.USAGE
        )
    checks = asyncio.run(
        run_checks(
            webhook_url=settings.webhook_url,
            ca_file=settings.ca_file,
            lockd_url=settings.lockd_url,
            request_timeout=settings.timeout,
        )
    )
    for check in checks:
        print(f"{'ok' if check.ok else 'FAILED'}  {check.what}: {check.detail}", file=out)
    return ExitCode.OK if all(check.ok for check in checks) else ExitCode.SELFTEST_FAILED


_COMMANDS = {
    "check-policy": check_policy,
    "convert": convert,
    "status": status,
    "why": why,
    "selftest": selftest,
}


def main(argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=logging.DEBUG if settings.verbose else logging.WARNING,
        format="kubectl-stagger: %(levelname)s %(name)s: %(message)s",
        stream=err,
    )
    try:
        return int(_COMMANDS[settings.command](settings, out=out, err=err))
    except Problem as problem:
        print(f"error: {problem}", file=err)
        return int(problem.code)


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
