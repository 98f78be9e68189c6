"""`python -m sim <command>`: the Kubernetes API emulator, the simulated cluster and the herd demo."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = ("apiserver", "cluster", "herd")
    if not args or args[0] not in commands:
        print(
            f"usage: python -m sim {{{','.join(commands)}}} [options]   (add --help after a command)",
            file=sys.stderr,
        )
        return 2
    command, rest = args[0], args[1:]
    # Imported lazily so that `python -m sim apiserver` does not pay for matplotlib and friends.
    if command == "apiserver":
        from sim.emulator import server

        return server.main(rest)
    if command == "cluster":
        from sim.cluster import simcluster

        return simcluster.main(rest)
    from sim.cluster import herd

    return herd.main(rest)


if __name__ == "__main__":
    sys.exit(main())
