"""Reason codes of `trace verify-bundle`: `<area>.<rule>`, stable, one meaning forever.

Each maps to (what it means, what to do). A check that fails names exactly one of these.
docs/evidence.md lists them for users; a test keeps the two in step.
"""

from __future__ import annotations

from engine.paths import cli

REASONS: dict[str, tuple[str, str]] = {
    "bundle.layout": (
        "the directory is not a trace bundle (statement.json or payload/ missing or unreadable)",
        "point at a directory written by `trace bundle`",
    ),
    "bundle.extra-file": (
        "the bundle root holds something besides statement.json, statement.sigstore.json and "
        "payload/",
        "a file was added beside the signed statement: remove it, or do not trust the bundle",
    ),
    "bundle.unsigned": (
        "the bundle has no signature (statement.sigstore.json is missing)",
        f"sign it (`{cli('bundle --sign')}` or `--key`), or do not trust it",
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
    "signature.trust-root": (
        "the Sigstore trust root could not be loaded (production TUF unreachable, or the "
        "--trust-config deadline passed), so the certificate and log were not checked",
        "pass --trust-config, or check the network, and verify again",
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
    "bundle.not-regular": (
        "a bundle file is not a regular file (a symlink, FIFO, device or socket)",
        "a bundle holds only regular files and directories: do not trust it, re-fetch it",
    ),
    "bundle.too-large": (
        "a bundle file, or the payload as a whole, exceeds the verifier's size cap",
        "a trace bundle is far smaller: do not trust it (the caps are in engine/audit/safefs.py)",
    ),
    "bundle.too-deep": (
        "payload/ is nested deeper, or holds more entries, than the verifier's cap",
        "a trace bundle is shallow and small: do not trust it",
    ),
    "subject.duplicate": (
        "the statement names the same payload file twice",
        "the statement was not written by trace: do not trust the bundle",
    ),
    "subject.unsafe-name": (
        "a subject name is absolute, climbs out with '..', or holds NUL, a backslash "
        "or empty parts",
        "the statement was not written by trace: do not trust the bundle",
    ),
    "policy.unknown-version": (
        "the statement names a policy name/version this checkout does not know",
        "update the checkout, or list the version in policy/signing-identity.json "
        "`policy_versions` if it is still accepted",
    ),
    "policy.digest-mismatch": (
        "a policy the statement names has another sha256 than the policy file of that name and "
        "version here (or the statement pins no policy digests)",
        "a policy changed without a version bump, or the bundle was decided under a loosened "
        "copy: do not trust it; bump the policy version on every change",
    ),
    "decision.missing": (
        "the bundle carries no signing decision (payload/decisions/signing.json, "
        "trace.decision/v1)",
        "re-create the bundle with `trace bundle`",
    ),
    "decision.denied": (
        "the bundled signing decision denies signing",
        f"read its reasons (`{cli('decide')}`); a denied bundle is for review only",
    ),
    "decision.evidence-mismatch": (
        "a file the signing decision names as its evidence is missing from the bundle or has "
        "another sha256",
        "the records were changed after the decision was made: do not trust the bundle",
    ),
    "decision.not-reproduced": (
        "the signing policy, run again over the bundled records with the decision's own policy "
        "file, date and waivers, decides otherwise",
        "the decision does not follow from the evidence: do not trust the bundle",
    ),
    "waiver.invalid": (
        "a waiver the signing decision lists is not bundled as a maintainer signed it, or no "
        "longer checks: unsigned, signed by a key the bundled maintainers policy does not list "
        "or by trace's own signing key, changed after signing, for another patch, or not what "
        "the decision says",
        "only a maintainer's signature lifts a reason: do not trust the bundle's decision",
    ),
    "records.disagree": (
        "the bundled records contradict each other (outcomes/, verify-result.json, gates/, "
        "replay.json, the decisions, model.json and prompt.txt)",
        "a record was forged or mixed from several runs: do not trust the bundle",
    ),
    "verify.not-reproduced": (
        "verify-result.json's verdict does not follow from its own claims, --check results or "
        "the expectation gate's record",
        "the verdict was edited: do not trust the bundle",
    ),
    "replay.pin-mismatch": (
        "an input the replay record pins (candidate, graph, template, fork revision, engine "
        "version, a step's key or derivation path) differs here",
        "check out the pinned revision of the project and the fork, then replay again",
    ),
    "replay.mismatch": (
        "a step rebuilt from the replay record (nix --check for outputs the store holds) gave a "
        "different outcome, or failed, or the verdict judged again differs from the bundle's",
        "the recorded evidence is not reproducible: do not trust it",
    ),
    "replay.failed": (
        "the replay could not run (bad replay record, or the engine failed)",
        "read the detail; fix the environment (nix, state directory) and replay again",
    ),
}
