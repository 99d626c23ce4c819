"""Model backends and content-addressed transcripts.

A model call is the one step of trace that runs outside the Nix sandbox (it needs the network).
Every call goes through `ask()`: its key is the digest of the role, backend, model id, parameters,
system prompt, user prompt and the digests of the inputs the prompt was made from; a recorded
transcript under that key is replayed instead of asking again (`refresh=True` asks again), so a
re-run answers the same and the Nix steps downstream of it stay cached.

Backends: `anthropic` (Messages API, the `anthropic` SDK), `openai` (any OpenAI-compatible chat
endpoint, the `openai` SDK, `base_url` configurable), `command` (an external program, the prompt
on stdin) and `replay` (recorded transcripts only; never the network). The SDKs are imported only
when a call is really made.
"""
