"""After `trace verify`: the libraries of `trace decide` (`decide`: the signing policy's decision
record), `trace waive` (`waive`: a maintainer's signed waiver) and `trace bundle` /
`trace verify --bundle` (`produce`: the bundle, signed when the policy allows). Auditing a bundle
(`trace verify-bundle`) is engine/audit/. The command lines are in engine/cli/ (bundle, decide,
waive, verify).
"""

# SLSA runDetails.builder.id of a bundle made by the command line (`--builder-id` overrides it).
DEFAULT_BUILDER = "urn:trace:builder:cli"
