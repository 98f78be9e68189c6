"""`python -m sim.controlplane --kubeconfig FILE [--data-dir DIR] [--port PORT]`."""

from __future__ import annotations

import sys

from sim.controlplane.cli import main

if __name__ == "__main__":
    sys.exit(main())
