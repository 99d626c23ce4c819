# The engine's runtime dependencies ([project.dependencies] of pyproject.toml) by their nixpkgs
# names: one list for the package and the dev shell.
ps: with ps; [
  plumbum
  networkx
  pydantic
  jinja2
  tomli
  rich
  filelock
  rfc8785
  sigstore
  cryptography
  anthropic
  openai
]
