"""The OIDC identity token for keyless signing: given explicitly, or detected in CI.

Detection uses `sigstore.oidc.detect_credential` (GitHub Actions, GitLab, Buildkite, CircleCI,
GCP). A GitHub job without `permissions: id-token: write` makes it raise rather than return None;
that becomes a SigningError that says which permission to add.
"""

from __future__ import annotations

from engine.errors import SigningError
from engine.paths import cli
from engine.signing.deadline import DEFAULT_SECONDS, call_with_deadline

GITHUB_HINT = (
    "this looks like a GitHub Actions job without an OIDC token: add\n"
    "      permissions:\n"
    "        id-token: write\n"
    "  to the workflow (jobs from forked pull requests cannot get one), "
    "or pass --identity-token, or sign offline with --key"
)


def identity_token(explicit: str | None, *, deadline: float = DEFAULT_SECONDS) -> str:
    """The raw token: `explicit` if given, else an ambient CI credential."""
    if explicit:
        return explicit.strip()
    import id as id_pkg
    import sigstore.oidc

    def detect() -> str | None:
        return sigstore.oidc.detect_credential()

    try:
        token = call_with_deadline(detect, deadline, "ambient OIDC token detection")
    except sigstore.oidc.IdentityError as exc:
        if isinstance(exc.__cause__, id_pkg.GitHubOidcPermissionCredentialError):
            raise SigningError(f"no OIDC identity token: {exc}", hint=GITHUB_HINT) from None
        raise SigningError(
            f"ambient OIDC credential detection failed: {exc}",
            hint="pass --identity-token, or sign offline with --key",
        ) from None
    if token is None:
        raise SigningError(
            "no OIDC identity token: none given and no CI credential found",
            hint="pass --identity-token TOKEN, run in CI with OIDC enabled, or sign offline "
            f"with --key (see `{cli('keygen')}`)",
        )
    return token
