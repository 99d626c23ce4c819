"""trace: a declarative build-graph engine on Nix that turns fix claims into signed evidence."""

__version__ = "0.1.0"
