"""`trace record`: a failing call of a package's program, captured under the verify harness and
written as a candidate skeleton (repro.sh, its data, an `[expect]` block), optionally minimised
first by delta debugging whose every trial is a cached step of a generated graph.

capture (the call as data, redacted) -> trials (run calls under the harness: a generated graph)
-> failure (how a run failed: the signature minimisation keeps, the `[expect]` it writes)
-> minimise (ddmin over argv, lines, bytes) -> skeleton (the candidate folder); `record` in
record.py is the one library call the command line (engine/cli/record.py) makes."""
