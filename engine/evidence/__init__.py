"""Evidence bundles: a directory a reviewer can audit link by link.

Layout of a bundle directory (everything below is written atomically, as one directory rename):

    payload/<path>            one file per claim (advisory, patch, rationale, review, reproducer,
                              run records, gate records, decisions, replay record, redaction rules)
    statement.json            the in-toto Statement v1 (RFC 8785 bytes): one subject per payload
                              file (sha256, sorted paths) and an SLSA-provenance-v1-style predicate
    statement.sigstore.json   the Sigstore bundle v0.3 signing exactly those bytes as DSSE
                              (absent when signing was not allowed or not asked for)
    timings.json              the run's per-step timings: informational, not a payload file
                              (the statement names its sha256 among its byproducts:
                              engine.evidence.timings)

Modules: `payload` (typed payload entries and canonical forms), `redact` (documented redaction
rules applied before anything is hashed), `replay` (the replay record), `statement` (in-toto +
SLSA predicate), `bundle` (assembling and writing the directory). Lower layers only: this package
imports nothing from `engine.signing` or `engine.audit`.
"""

PAYLOAD_DIR = "payload"
STATEMENT_FILE = "statement.json"
SIGNATURE_FILE = "statement.sigstore.json"
