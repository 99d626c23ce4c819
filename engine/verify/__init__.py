"""`trace verify`: build a package before and after a candidate fix, run its reproducer against
both inside the Nix sandbox, and decide from how those builds exited whether the fix holds.

Modules: `result` (the `VerifyResult` model other features consume), `verdict` (claims and
reason codes from a run's step results), `cached` (the verdict judged again from the cache
index: the only evidence source of `trace decide` and `trace bundle`; a result file is never
one), `command` (the CLI subcommand).
"""
