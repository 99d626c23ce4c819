# A nixpkgs fork checked by trace: `nix run .#verify` at the fork's root verifies every fix
# candidate in trace/candidates (or `nix run .#verify -- NAME…`), writes one evidence bundle per
# candidate under .trace/bundles, signs where the policy allows and an identity is available
# (`-- --key FILE`, `--identity-token`, or CI's OIDC token), and exits non-zero when any
# candidate is not allowed. Commit first: a dirty tree is refused unless `-- --allow-dirty`.
#
# nixpkgs already has a flake.nix: instead of this file, add the two parts marked `trace` to it
# (the input, `trace` in the outputs' arguments, and `apps`).
{
  description = "A nixpkgs fork whose security fixes are verified with trace";

  # trace: where you get trace from
  inputs.trace.url = "github:trace/trace";

  outputs =
    { self, trace }:
    {
      # trace: one `verify` app per system trace supports
      apps = builtins.mapAttrs (system: _: rec {
        verify = trace.lib.mkVerifyApp {
          inherit system;
          # everything below is a string relative to the fork's root (shown: the defaults)
          packageSet = "."; # the package set to verify: import ./. { }
          config = "trace"; # candidates/, steps.toml (optional), policy/ (optional)
          # To build trace from this fork's own Python packages instead of trace's pinned
          # nixpkgs, replace `inherit system;` with: pkgs = self.legacyPackages.${system};
        };
        default = verify;
      }) trace.packages;
    };
}
