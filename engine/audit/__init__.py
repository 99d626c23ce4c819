"""`trace verify-bundle`: the audit of a bundle, a verify that trusts no summary.

Modules: `reasons` (the stable reason-code catalogue of this command), `identity` (the signer
lock, policy/signing-identity.json), `signature` (keyless via sigstore-python's Verifier, key mode
via engine.signing.keymode), `checks` (layout, statement, every payload digest, policy versions),
`replay` (rebuild from the replay record and compare outcomes), `report` (verdict table, JSON).
What `trace bundle` and `trace verify --bundle` write is engine/signoff/produce.py. The command
line is engine/cli/verify_bundle.py.
"""
