"""How many fuzz cases the fuzz tests run, per surface: `python -m tests.fuzz.stats --out sim/chaos/fuzz.json`
runs `pytest tests/fuzz` once with hypothesis' statistics and counts, per test module, the examples
hypothesis ran (every phase: explicit examples, generated ones) plus one case per test that is not a
hypothesis test (a table row, a process run). `make chaos` puts the counts in sim/chaos/REPORT.md.

Hypothesis tests written inside an async test (one server shared by every example) print no statistics;
those are counted from their `max_examples`, as hypothesis runs that many unless it stops early."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

FUZZ = Path(__file__).parent
SURFACES = {
    "test_lockd_api.py": "lockd lock API (queries, methods, headers, bodies, malformed HTTP)",
    "test_policy_files.py": "policy files (changed fields, mangled text, reloads)",
    "test_initclient_env.py": "init client environment",
    "test_webhook_admission.py": "AdmissionReviews (/mutate/pods, /mutate/jobs)",
    "test_webhook_grants.py": "group grant API (/v1/groups/grant, wait, admit; tokens)",
}
_HEADER = re.compile(r"^(tests/fuzz/[\w.]+)::([\w\[\]\-.]+):$")
_CASES = re.compile(r"- (\d+) passing, (\d+) failing")
_RESULT = re.compile(r"^(?:PASSED|FAILED|ERROR|XFAIL|XPASS) (tests/fuzz/[\w.]+)::")


def count(output: str) -> tuple[Counter[str], Counter[str]]:
    """Hypothesis cases per module from the statistics, and test outcomes per module (`-rA` lines)."""
    cases: Counter[str] = Counter()
    module = ""
    for line in output.splitlines():
        header = _HEADER.match(line.strip())
        if header:
            module = Path(header[1]).name
            continue
        found = _CASES.search(line)
        if found and module:
            cases[module] += int(found[1]) + int(found[2])
    tests: Counter[str] = Counter()
    for line in output.splitlines():
        result = _RESULT.match(line.strip())
        if result:
            tests[Path(result[1]).name] += 1
    return cases, tests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.stats", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="where to write the counts (JSON)")
    args = parser.parse_args(argv)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(FUZZ), "-q", "-rA", "-p", "no:cacheprovider", "-n", "0",
         "--hypothesis-show-statistics"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    cases, tests = count(run.stdout)
    inner = _inner_examples()
    surfaces = {
        surface: {"cases": cases[module] + inner[module] + tests[module], "tests": tests[module]}
        for module, surface in SURFACES.items()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"exitCode": run.returncode, "surfaces": surfaces}, indent=1) + "\n")
    print(json.dumps(surfaces, indent=1))
    return run.returncode


def _inner_examples() -> Counter[str]:
    """`max_examples` of the hypothesis tests defined inside another test (no statistics printed)."""
    found: Counter[str] = Counter()
    for module in SURFACES:
        text = (FUZZ / module).read_text()
        constants = {name: int(value) for name, value in re.findall(r"^(\w+_EXAMPLES) = (\d+)", text, re.M)}
        for name in re.findall(r"^    @settings\([^)]*max_examples=(\w+)", text, re.M):
            found[module] += int(name) if name.isdigit() else constants.get(name, 0)
    return found


if __name__ == "__main__":
    sys.exit(main())
