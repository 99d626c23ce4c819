# What a nixpkgs fork gets from trace: `lib.addApps` (the apps a fork's flake.nix adds to its
# outputs), `lib.mkVerifyApp` (the `verify` app alone; arguments in nix/verify-app.nix) and the
# `trace` CLI app. Every function checks its arguments and says what to pass instead.
{
  lib,
  systems,
  pkgsFor,
  traceFor,
}:
let
  inherit (builtins) concatStringsSep elem attrNames filter isFunction;

  # the package set to build trace with: trace's pinned nixpkgs for `system`, or the given `pkgs`
  pickPkgs =
    fn: args:
    if (args.pkgs or null) != null then
      args.pkgs
    else if (args.system or null) != null then
      if elem args.system systems then
        pkgsFor args.system
      else
        throw "trace.lib.${fn}: system '${args.system}' is not one trace supports (${concatStringsSep ", " systems})"
    else
      throw "trace.lib.${fn}: pass `system` (e.g. system = \"x86_64-linux\") to build trace with its pinned nixpkgs, or `pkgs` (e.g. pkgs = self.legacyPackages.\${system}) to build it with yours";

  onlyKnown =
    fn: known: args:
    let
      unknown = filter (n: !(elem n known)) (attrNames args);
    in
    if unknown != [ ] then
      throw "trace.lib.${fn}: unknown argument(s) ${concatStringsSep ", " unknown}; accepted: ${concatStringsSep ", " known}"
    else
      args;

  verifyArgs = [
    "self"
    "packageSet"
    "config"
    "candidates"
    "steps"
    "policy"
    "extraArgs"
    "cli"
  ];

  # the trace CLI as an app; TRACE_CLI is the command its hints print (`nix run .#trace --` in a fork)
  mkCliApp =
    {
      system ? null,
      pkgs ? null,
      cli ? "trace",
      # arguments before the user's: [ "init" ] for the `init` app
      command ? [ ],
    }@args:
    let
      p = pickPkgs "mkCliApp" args;
      script = p.writeShellScript "trace-cli" ''
        export TRACE_CLI=${p.lib.escapeShellArg cli}
        exec ${traceFor p}/bin/trace ${p.lib.escapeShellArgs command} "$@"
      '';
    in
    {
      type = "app";
      program = "${script}";
    };

  mkVerifyApp =
    args:
    let
      checked = onlyKnown "mkVerifyApp" ([ "system" "pkgs" ] ++ verifyArgs) args;
      p = pickPkgs "mkVerifyApp" checked;
    in
    import ./verify-app.nix { inherit (p) lib writeShellScript; } (traceFor p) (
      builtins.removeAttrs checked [
        "system"
        "pkgs"
      ]
      // {
        system = checked.system or p.system or p.stdenv.hostPlatform.system or null;
      }
    );

  # outputs // { apps.<system> = outputs.apps.<system> // { verify, trace }; } for every system
  # trace supports. `pkgs`, when given, is a function: system -> the package set to build trace
  # with (e.g. `system: self.legacyPackages.${system}`). The other arguments go to mkVerifyApp.
  addApps =
    args: outputs:
    let
      checked = onlyKnown "addApps" ([ "pkgs" ] ++ verifyArgs) args;
      pkgsArg =
        system:
        if (checked.pkgs or null) == null then
          { inherit system; }
        else if isFunction checked.pkgs then
          { pkgs = checked.pkgs system; }
        else
          throw "trace.lib.addApps: `pkgs` must be a function from a system to a package set, e.g. pkgs = system: self.legacyPackages.\${system};";
      cli = checked.cli or "nix run .#trace --";
      forSystem =
        system:
        (outputs.apps.${system} or { })
        // {
          verify = mkVerifyApp (
            builtins.removeAttrs checked [ "pkgs" ] // pkgsArg system // { inherit cli system; }
          );
          trace = mkCliApp (pkgsArg system // { inherit cli; });
        };
    in
    if !(builtins.isAttrs outputs) then
      throw "trace.lib.addApps: the second argument must be the flake's outputs (an attribute set)"
    else
      outputs // { apps = lib.genAttrs systems forSystem; };
in
{
  inherit mkVerifyApp mkCliApp addApps;
}
