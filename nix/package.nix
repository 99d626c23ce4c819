# trace, packaged the nixpkgs way: a Python application built from nixpkgs' Python packages.
# The shipped data (graphs/, templates/, policy/, trace_sandbox/) goes to $out/share/trace, and the wrapper points
# TRACE_DATA_DIR there (see engine/paths.py), so `trace` needs nothing from the working directory.
# nix and git are appended to PATH as a fallback: the user's own nix (the one running
# `nix run`) comes first.
{
  lib,
  python3Packages,
  nix,
  git,
}:
let
  root = ./..;
  pyproject = builtins.fromTOML (builtins.readFile (root + "/pyproject.toml"));
  # Only what the package needs: a change to tests/ or nix/ does not rebuild it.
  keep = [
    "pyproject.toml"
    "README.md"
    "engine"
    "graphs"
    "templates"
    "policy"
    "trace_sandbox"
  ];
  src = builtins.path {
    path = root;
    name = "trace-source";
    filter =
      path: type:
      let
        rel = builtins.substring (builtins.stringLength (toString root) + 1) (-1) (toString path);
        top = builtins.head (builtins.split "/" rel);
        base = baseNameOf path;
      in
      # nix/templates: the fork template `trace init` copies (not nix/*.nix: no rebuild for those)
      (builtins.elem top keep || rel == "nix" || builtins.match "nix/templates(/.*)?" rel != null)
      && base != "__pycache__"
      && builtins.match ".*\\.pyc" base == null;
  };
in
python3Packages.buildPythonApplication {
  pname = "trace-engine";
  inherit (pyproject.project) version;
  pyproject = true;
  inherit src;

  build-system = [ python3Packages.setuptools ];

  dependencies = import ./python-deps.nix python3Packages;

  postInstall = ''
    mkdir -p $out/share/trace
    cp -r graphs templates policy $out/share/trace/
    mkdir -p $out/share/trace/nix
    cp -r nix/templates $out/share/trace/nix/
    # the sandbox package (stdlib only) is a `trace:` input of the gate and run steps
    cp -r trace_sandbox $out/share/trace/
    find $out/share/trace -name __pycache__ -prune -exec rm -rf {} +
  '';

  makeWrapperArgs = [
    "--set-default"
    "TRACE_DATA_DIR"
    "${placeholder "out"}/share/trace"
    "--suffix"
    "PATH"
    ":"
    (lib.makeBinPath [
      nix
      git
    ])
  ];

  pythonImportsCheck = [
    "engine"
    "engine.cli"
  ];

  meta = {
    description = pyproject.project.description;
    license = lib.licenses.mit;
    mainProgram = "trace";
    platforms = lib.platforms.linux;
  };
}
