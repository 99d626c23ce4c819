"""`python3 -I -S DIR`, DIR being this package's directory: one reproducer run (see main.py).

Isolated mode puts DIR itself, not the directory holding `trace_sandbox`, on sys.path: this
entry puts that directory there instead, so the harness is imported under its one name
(`trace_sandbox.harness`), the same name the gates and the host use."""

import os
import sys

if not __package__:  # run as a directory (`python3 -I -S DIR`), not as `-m trace_sandbox.harness`
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trace_sandbox.harness.main import main

sys.exit(main())
