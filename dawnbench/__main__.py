import sys

from dawnbench.cli import main

sys.exit(main())
