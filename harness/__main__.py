"""`python -m harness`: the in-image command (see harness.cli)."""
import sys

from harness.cli import main

sys.exit(main())
