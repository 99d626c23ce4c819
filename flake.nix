{
  description = "trace: turn 'this patch fixes that bug' into signed, replayable evidence, with Nix";

  # Locked by hand in flake.lock to a nixos-25.11 revision. Tests cannot fetch it (no network) and
  # override it with tests/fixtures/flake-standin (a test stand-in, not nixpkgs).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = nixpkgs.lib.genAttrs systems;
      pkgsFor = system: nixpkgs.legacyPackages.${system};
      traceFor = pkgs: pkgs.callPackage ./nix/package.nix { };

      # What a fork's flake.nix calls. `system` picks trace's own pinned nixpkgs to build the tool;
      # pass `pkgs` instead to build it from another package set (a nixpkgs fork can pass its own
      # legacyPackages). The other arguments are described in nix/verify-app.nix.
      mkVerifyApp =
        {
          system ? null,
          pkgs ? pkgsFor system,
          ...
        }@args:
        import ./nix/verify-app.nix { inherit (pkgs) lib writeShellScript; } (traceFor pkgs) (
          builtins.removeAttrs args [
            "system"
            "pkgs"
          ]
        );
    in
    {
      packages = forAllSystems (system: rec {
        trace = traceFor (pkgsFor system);
        default = trace;
      });

      apps = forAllSystems (system: rec {
        verify = mkVerifyApp { inherit system; };
        default = verify;
      });

      devShells = forAllSystems (system: {
        default = (pkgsFor system).callPackage ./nix/shell.nix { };
      });

      lib = { inherit mkVerifyApp; };

      overlays.default = final: prev: { trace = final.callPackage ./nix/package.nix { }; };

      templates = rec {
        fork = {
          path = ./nix/templates/fork;
          description = "nixpkgs fork: `nix run .#verify` checks the fix candidates in trace/";
          welcomeText = ''
            Added flake.nix and trace/. Put each fix candidate in trace/candidates/<name>/
            (candidate.toml, patch, reproducer, advisory), commit, then run `nix run .#verify`.
            In a nixpkgs fork that already has a flake.nix, merge the marked lines into it.
          '';
        };
        default = fork;
      };
    };
}
