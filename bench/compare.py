"""`python -m bench.compare`: the version-bump comparison, now `dawnbench compare` (dawnbench/compare.py)."""
from __future__ import annotations

import sys

from dawnbench.compare import main

if __name__ == "__main__":
    sys.exit(main())
