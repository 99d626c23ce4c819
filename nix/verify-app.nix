# lib.mkVerifyApp: the `nix run .#verify` app of a nixpkgs fork (lib.addApps adds it for you).
#
# The app runs `trace fork` at the fork's root (the current directory, or `--fork DIR`): the
# candidates, extra steps and policy overrides are read from the checkout, the package set is the
# fork's committed tree, and a dirty tree is refused unless `--allow-dirty`. So every setting here
# is a string relative to the fork's root, never a Nix path (a path would point into the store
# copy of the flake, not at the checkout).
#
#   trace.lib.mkVerifyApp {
#     system = "x86_64-linux";     # or pkgs = <a nixpkgs package set to build trace with>
#     packageSet = ".";            # import ./. { config = {}; overlays = []; system = …; }
#     config = "trace";            # candidates/, steps.toml (optional), policy/ (optional)
#     extraArgs = [ "--no-sign" ]; # more `trace fork` options (`trace fork --help`)
#     inherit self;                # the package set is then the flake's own source (below)
#   }
{ lib, writeShellScript }:
trace:
{
  # the package set to verify, relative to the fork root
  packageSet ? ".",
  # the fork's trace folder: candidates/, optional steps.toml and policy/
  config ? "trace",
  # override single locations inside it (null: the defaults below `config`)
  candidates ? null,
  steps ? null,
  policy ? null,
  # more `trace fork` options, e.g. [ "--no-sign" ] or [ "--key" "/path/to/key" ]
  extraArgs ? [ ],
  # the command the hints print for the trace CLI (lib.addApps adds it as `.#trace`)
  cli ? "trace",
  # the fork flake's `self`: its source as Nix copied it (git-tracked files) is the package set,
  # imported purely (config = {}; overlays = []; system); null: the work tree (impure import)
  self ? null,
  # the system the package set is imported for (set by lib.addApps / mkVerifyApp's `system`)
  system ? null,
}:
let
  where = "trace.lib.mkVerifyApp";
  check =
    name: v:
    if builtins.isPath v then
      throw "${where}: '${name}' must be a string relative to the fork root (e.g. \"trace/candidates\"), not a Nix path: a path points into the store copy of the flake, not at your checkout"
    else if !(builtins.isString v) then
      throw "${where}: '${name}' must be a string relative to the fork root, not a ${builtins.typeOf v}"
    else
      v;
  opt = name: flag: v: if v == null then [ ] else [ flag (check name v) ];
  # the flake's source without the trace folder (candidates, steps, policy: each enters its own
  # steps' keys), so a committed candidate change leaves the package set's store path as it is
  source =
    let
      root = toString self.outPath;
      skip = check "config" config;
      relOf = p: builtins.substring (builtins.stringLength root + 1) (-1) (toString p);
    in
    builtins.path {
      name = "fork-source";
      path = self.outPath;
      filter =
        p: _:
        let
          rel = relOf p;
        in
        rel != skip && builtins.substring 0 (builtins.stringLength skip + 1) rel != "${skip}/";
    };
  extra =
    if builtins.isList extraArgs && builtins.all builtins.isString extraArgs then
      extraArgs
    else
      throw "${where}: 'extraArgs' must be a list of strings, e.g. [ \"--no-sign\" ]";
  args = [
    "fork"
    "--package-set"
    (check "packageSet" packageSet)
    "--config"
    (check "config" config)
  ]
  ++ opt "candidates" "--candidates" candidates
  ++ opt "steps" "--steps" steps
  ++ opt "policy" "--policy" policy
  ++ (
    if self == null then
      [ ]
    else if !(self ? outPath) then
      throw "${where}: 'self' must be the fork flake's `self` (pass `inherit self;`)"
    else
      [
        "--source"
        "${source}"
        # what the replay records name as `nix --version`: the Nix evaluating this app (the one
        # `nix run` runs), so a no-op run starts no `nix --version` of its own
        "--nix-version"
        "nix (Nix) ${builtins.nixVersion}"
      ]
      ++ (
        if self ? narHash then
          [
            "--source-nar-hash"
            self.narHash
          ]
        else
          [ ]
      )
  )
  ++ (if system == null then [ ] else [ "--system" system ])
  ++ extra;
  script = writeShellScript "trace-verify" ''
    export TRACE_CLI=${lib.escapeShellArg (check "cli" cli)}
    exec ${trace}/bin/trace ${lib.escapeShellArgs args} "$@"
  '';
in
{
  type = "app";
  program = "${script}";
}
