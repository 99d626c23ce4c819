"""Policy as data: the reason-code catalogue, routing (before a model sees a candidate) and
signing (after the evidence exists), with waivers.

Modules: `source` (reading TOML policy files with line-accurate errors), `reasons` (the catalogue),
`critical` (the critical-package list), `routing` (facts -> one of four states), `waivers`,
`evidence_view` (the view of verify results the signing policy reads), `signing_rules` (the
signing policy file), `signing_decision` (allow/deny with reason codes); `trace route` and
`trace decide` are in engine/cli/. Decision functions are pure: typed models and a `today` date
in, typed decision out.
"""
