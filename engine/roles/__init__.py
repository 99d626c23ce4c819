"""The model roles: each turns typed inputs into a request and a model's answer into a typed
output or a recorded failure (a stable reason code). Roles never call Nix and never trust an
answer: a Patcher's diff must apply and then be verified, a Reproducer's script runs only through
the harness, a Reviewer's verdict is one claim among the bundle's.

`agentfile` loads the agent file (graphs/agent.toml) and enforces the Reviewer's isolation: a
reviewer step cannot need a Patcher's prompt, transcript or rationale, and its template is
rendered with nothing but the values its step needs.
"""
