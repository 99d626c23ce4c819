"""The machine config file's model (`machine.toml`, `trace schema machine`): validated here,
then used as engine/machine.py's plain `Machine` (what `load_machine` returns)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


def _strs(description: str) -> Any:
    return Field(default=None, description=description)


class MachineConfig(BaseModel):
    """`machine.toml`: this machine's caches and builders (`trace schema machine`)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    substituters: list[Annotated[str, Field(min_length=1)]] | None = _strs(
        "binary caches to substitute from, in order (replaces Nix's `substituters`); every one "
        "must be signed by a key in trusted-public-keys"
    )
    trusted_public_keys: list[str] | None = Field(
        default=None,
        alias="trusted-public-keys",
        description="`name:base64` Ed25519 public keys (as `nix-store "
        "--generate-binary-cache-key` writes them) whose signatures make a cached path "
        "acceptable (replaces Nix's `trusted-public-keys`)",
    )
    require_sigs: bool | None = Field(
        default=None,
        alias="require-sigs",
        description="may only be true: trace never accepts an unsigned substituted path",
    )
    builders: list[str] | None = _strs(
        "Nix remote builder specifications (`ssh-ng://host system key jobs speed features`), "
        "used as they are by the one `nix-build` of a run (replaces Nix's `builders`)"
    )
    check_builders: list[str] | None = Field(
        default=None,
        alias="check-builders",
        description="builders for the `--check` rebuilds of determinism checks (only there: "
        "local builds off), so `deterministic` means bit-identical on two machines",
    )
    max_jobs: int | None = Field(
        default=None,
        alias="max-jobs",
        ge=0,
        description="builds this machine runs itself at once (replaces trace's default and a "
        "pipeline's `jobs`; `-j` still wins); 0: every build goes to `builders`, and the "
        "determinism checks to `check-builders`, else to `builders` (never this machine)",
    )
    push_to: str | None = Field(
        default=None, alias="push-to", description="`trace push`'s cache when --to is not given"
    )
    secret_key_file: str | None = Field(
        default=None,
        alias="secret-key-file",
        description="`trace push`'s signing key (a `nix-store --generate-binary-cache-key` "
        "secret key file) when --key is not given",
    )
