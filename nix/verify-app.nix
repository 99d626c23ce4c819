# lib.mkVerifyApp: the `nix run .#verify` app of a nixpkgs fork.
#
# The app runs `trace fork` at the fork's root (the current directory, or `--fork DIR`) on its
# *working tree*: the package set is `import <root>/<packageSet> {}`, the candidates, extra steps
# and policy overrides are read from the checkout, and a dirty tree is refused unless
# `--allow-dirty`. So every setting here is a string relative to the fork's root, never a Nix
# path (a path would point into the store copy of the flake, not at the checkout).
{ lib, writeShellScript }:
trace:
{
  # the package set to verify, relative to the fork root: `import ./. {}` in a nixpkgs fork
  packageSet ? ".",
  # the fork's trace folder: candidates/, optional steps.toml and policy/
  config ? "trace",
  # override single locations inside it (null: the defaults below `config`)
  candidates ? null,
  steps ? null,
  policy ? null,
  # more `trace fork` options, e.g. [ "--sign" "never" ]
  extraArgs ? [ ],
}:
let
  check =
    name: v:
    if builtins.isPath v then
      throw "trace.lib.mkVerifyApp: '${name}' must be a string relative to the fork root (e.g. \"${config}/candidates\"), not a Nix path: a path points into the store copy of the flake, not at your checkout"
    else
      v;
  opt = name: flag: v: if v == null then [ ] else [ flag (check name v) ];
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
  ++ extraArgs;
  script = writeShellScript "trace-verify" ''
    exec ${trace}/bin/trace ${lib.escapeShellArgs args} "$@"
  '';
in
{
  type = "app";
  program = "${script}";
}
