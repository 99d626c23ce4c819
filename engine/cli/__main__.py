"""`python -m engine.cli ...` runs the `trace` command line."""

import sys

from engine.cli import main

sys.exit(main())
