"""What a draft is run with (the fork, its state, the package's source, the policy): shared by the
draft and the stages it calls (accuracy, decide), which must not import the draft itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class DraftOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    fork: Path
    state: Path
    source: Path
    refresh: bool = False
    jobs: int | None = None
    signing_policy: Path | None = None
    upstream: dict[str, Any] | None = None
