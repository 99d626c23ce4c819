"""`ask()`: the one way roles talk to a model. Replays a recorded transcript when its key is
known (unless `refresh`), else calls the backend and records the exchange atomically."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.errors import ModelError
from engine.models.model_spec import ModelSpec, Request
from engine.models.transcript import (
    Transcript,
    TranscriptStore,
    make_transcript,
    transcript_key,
)


class Answer(BaseModel):
    """A transcript and whether it was replayed from the store or asked now."""

    model_config = ConfigDict(frozen=True)

    transcript: Transcript
    replayed: bool

    @property
    def text(self) -> str:
        return self.transcript.response


def ask(
    spec: ModelSpec, request: Request, store: TranscriptStore, *, refresh: bool = False
) -> Answer:
    key = transcript_key(spec, request)
    recorded = None if refresh else store.get(key)
    if recorded is not None:
        return Answer(transcript=recorded, replayed=True)
    if spec.backend == "replay":
        why = "--refresh asks again, which" if refresh else "no transcript is recorded for"
        raise ModelError(
            f"role '{request.role}' uses backend 'replay' for model '{spec.model}', and {why} "
            f"key {key[:16]}… (looked in {store.root})",
            reason="model-no-transcript",
            hint="run once with a live backend to record it, or copy the transcripts of the "
            "run you want to replay into the state directory",
        )
    from engine.models.backends import call

    text = call(spec, request)
    transcript = make_transcript(spec, request, spec.backend, text)
    store.put(transcript)
    return Answer(transcript=transcript, replayed=False)
