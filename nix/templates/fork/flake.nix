# A nixpkgs fork checked by trace: `nix run .#verify` at the fork's root verifies every fix
# candidate in trace/candidates (or `nix run .#verify -- NAME…`), writes one evidence bundle per
# candidate under .trace/bundles, signs where the policy allows and an identity is available
# (`-- --key FILE`, `--identity-token`, or CI's OIDC token), and exits non-zero when any
# candidate is not allowed. `nix run .#trace -- …` is the trace CLI (e.g. `-- schema candidate`).
# Commit first: a dirty tree is refused unless `-- --allow-dirty`.
#
# A fork that already has a flake.nix (nixpkgs has one): do not use this file; run
# `nix run <trace>#init -- --trace-url <trace>` at the fork's root, which adds the two lines
# marked `trace` below to the existing flake.nix (or prints them when it cannot).
{
  description = "A nixpkgs fork whose security fixes are verified with trace";

  # trace: where you get trace from. THE ONE THING TO SET: the flake reference you run trace
  # from (e.g. github:OWNER/trace, or path:/path/to/a/checkout of trace).
  inputs.trace.url = "github:OWNER/trace";

  # trace: your outputs, plus apps.<system>.verify and apps.<system>.trace. addApps' first
  # argument: self (the package set is then this flake's own source, as Nix copied it: the
  # git-tracked files, imported purely), packageSet (default "."), config (default "trace"), extraArgs (e.g.
  # [ "--no-sign" ]), pkgs (system -> the package set to build trace with; default: trace's own
  # pinned nixpkgs). See nix/fork.nix and nix/verify-app.nix in trace.
  outputs = { self, trace }: trace.lib.addApps { inherit self; } { };
}
