# devShells.default: Python with the engine's dependencies and the test tools, ruff, nix and git.
# In the checkout, `python -m engine.cli` (or `pip install -e .` into a venv) runs trace.
{
  mkShell,
  python3,
  ruff,
  nix,
  git,
}:
mkShell {
  name = "trace-dev";
  packages = [
    (python3.withPackages (
      ps:
      import ./python-deps.nix ps
      ++ (with ps; [
        setuptools
        pytest
        hypothesis
        mypy
        pyjwt
        pyyaml
      ])
    ))
    ruff
    nix
    git
  ];
}
