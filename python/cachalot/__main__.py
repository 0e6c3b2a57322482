"""`cachalot ...` and `python -m cachalot ...`: the command line (see `cachalot.cli`)."""

import sys

from cachalot.cli import main

if __name__ == "__main__":
    sys.exit(main())
