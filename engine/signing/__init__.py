"""Signing a bundle's statement: keyless (Sigstore: Fulcio + Rekor) or with a local ECDSA key.

Modules: `errors` (re-exports engine.errors.SigningError), `deadline` (hard deadlines around
network calls), `dsse` (PAE and the envelope), `keys` (`trace keygen`, loading keys, key hints),
`keymode` (DSSE in a Sigstore bundle v0.3 with a public-key hint), `oidc` (identity tokens:
explicit or ambient CI), `keyless` (sigstore-python's SigningContext/Signer.sign_dsse).
`import sigstore` happens only inside the functions that sign or verify keylessly.
"""
