"""The verify harness: one reproducer run against one build, inside the Nix sandbox, recording
how the TARGET ended (main.py). STDLIB ONLY, like the rest of trace_sandbox."""
