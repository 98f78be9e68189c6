"""`python -m sim COMMAND`: see `sim.cli`."""

from __future__ import annotations

import sys

from sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
