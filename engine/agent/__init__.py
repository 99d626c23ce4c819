"""`trace draft` and `trace land`: the model roles wired to verify and decide.

The command layer of the agent: it runs the agent file's model steps (engine/roles) in order,
writes the drafted candidate, verifies it with the standard pipeline (the only place Nix runs),
asks the reviewers, and decides. Every step's outcome is recorded in the candidate's
`draft.json` with its transcript digest, so a reader sees what each model saw and said.
"""
