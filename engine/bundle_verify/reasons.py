"""Reason codes of `trace verify-bundle`: `<area>.<rule>`, stable, one meaning forever.

Each maps to (what it means, what to do). A check that fails names exactly one of these.
"""

from __future__ import annotations

REASONS: dict[str, tuple[str, str]] = {
    "bundle.layout": (
        "the directory is not a trace bundle (statement.json or payload/ missing or unreadable)",
        "point at a directory written by `trace bundle`",
    ),
    "bundle.unsigned": (
        "the bundle has no signature (statement.sigstore.json is missing)",
        "sign it (`trace bundle --sign` or `--key`), or do not trust it",
    ),
    "signature.malformed": (
        "statement.sigstore.json is not a Sigstore bundle v0.3 this tool can read",
        "re-create the bundle; do not edit the signature file",
    ),
    "signature.invalid": (
        "the DSSE signature does not verify over the signed statement",
        "the statement or the signature was changed after signing: do not trust the bundle",
    ),
    "signature.certificate": (
        "the signing certificate does not chain to a trusted Fulcio root at signing time",
        "check --trust-config; a certificate from another instance is not trusted",
    ),
    "signature.sct": (
        "the certificate's embedded SCT does not verify against a trusted CT log",
        "check --trust-config; the certificate was not logged by a trusted CT log",
    ),
    "signature.tlog": (
        "the transparency-log entry (inclusion proof, checkpoint, signed entry timestamp or its "
        "agreement with the envelope) does not verify",
        "the log entry does not belong to this signature, or the log is not trusted",
    ),
    "signature.time": (
        "the log's integration time lies outside the signing certificate's validity",
        "the signature was logged after the short-lived certificate expired: re-sign",
    ),
    "signature.unknown-key": (
        "a key-mode bundle whose key is neither given with --key nor listed in "
        "policy/signing-identity.json",
        "pass the signer's public key with --key, or add it to the identity policy",
    ),
    "identity.mismatch": (
        "the signer identity (certificate SAN) is not listed in policy/signing-identity.json",
        "only bundles signed by the locked identity are accepted; check who signed it",
    ),
    "identity.issuer": (
        "the signer identity is listed, but its OIDC issuer is not the one the policy locks",
        "the same name from another identity provider is another signer: do not trust it",
    ),
    "payload.type": (
        "the DSSE payload type is not application/vnd.in-toto+json",
        "only in-toto statements are bundles",
    ),
    "statement.not-signed": (
        "statement.json differs from the statement inside the signature",
        "statement.json was edited after signing: do not trust the bundle",
    ),
    "statement.malformed": (
        "the statement is not an in-toto Statement v1 with an SLSA provenance predicate",
        "re-create the bundle with `trace bundle`",
    ),
    "subject.digest-mismatch": (
        "a payload file's sha256 differs from the statement's subject",
        "a payload file was changed after signing: do not trust the bundle",
    ),
    "subject.missing-file": (
        "a payload file named by the statement is missing",
        "the bundle is incomplete: fetch it again",
    ),
    "subject.extra-file": (
        "payload/ holds a file the statement does not name",
        "a file was added after signing: remove it or do not trust the bundle",
    ),
    "policy.unknown-version": (
        "the statement names a policy name/version this checkout does not know",
        "update the checkout, or list the version in policy/signing-identity.json "
        "`policy_versions` if it is still accepted",
    ),
    "replay.pin-mismatch": (
        "an input the replay record pins (candidate, graph, template, fork revision, engine "
        "version) differs here",
        "check out the pinned revision of the project and the fork, then replay again",
    ),
    "replay.mismatch": (
        "a step rebuilt from the replay record gave a different outcome than the bundle records",
        "the recorded evidence is not reproducible: do not trust it",
    ),
    "replay.failed": (
        "the replay could not run (bad replay record, or the engine failed)",
        "read the detail; fix the environment (nix, state directory) and replay again",
    ),
}
