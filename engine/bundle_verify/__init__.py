"""`trace verify-bundle`: a verify that trusts no summary.

Modules: `reasons` (the stable reason-code catalogue of this command), `identity` (the signer
lock, policy/signing-identity.json), `signature` (keyless via sigstore-python's Verifier, key mode
via engine.signing.keymode), `checks` (layout, statement, every payload digest, policy versions),
`replay` (rebuild from the replay record and compare outcomes), `report` (verdict table, JSON),
`produce` (what `trace bundle` and `trace verify --bundle` write). The command lines are in
engine/cli/ (bundle, keygen, verify_bundle, verify).
"""

# SLSA runDetails.builder.id of a bundle made by the command line (`--builder-id` overrides it).
DEFAULT_BUILDER = "urn:trace:builder:cli"
