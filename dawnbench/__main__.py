import sys

from dawnbench.launcher import main

sys.exit(main())
