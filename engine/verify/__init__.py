"""`trace verify`: build a package before and after a candidate fix, run its reproducer against
both inside the Nix sandbox, and decide from how those builds exited whether the fix holds.

Modules: `fork_graph` (find the candidate's fork, load its verify graph; the stages that build and
judge it are engine/pipeline/), `verdict` (claims and reason codes from a run's step results),
`cached` (the verdict judged again from the cache index: the only evidence source of
`trace decide` and `trace bundle`; a result file is never one). The `VerifyResult` model other
features consume is engine/verify_result.py (below the policy, which reads it); the command line
is engine/cli/verify.py.
"""
