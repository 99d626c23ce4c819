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
      # lib.addApps / lib.mkVerifyApp for forks, and the CLI apps (arguments: nix/fork.nix)
      fork = import ./nix/fork.nix {
        inherit (nixpkgs) lib;
        inherit systems pkgsFor traceFor;
      };
    in
    {
      packages = forAllSystems (system: rec {
        trace = traceFor (pkgsFor system);
        default = trace;
      });

      # `nix run <trace> -- …` is the CLI; `nix run <trace>#init` sets up a fork (`trace init`);
      # `nix run <trace>#verify` is the fork verifier (`trace fork`) for the fork in the current
      # directory (a fork's own flake gets `.#verify` and `.#trace` from lib.addApps).
      apps = forAllSystems (system: rec {
        trace = fork.mkCliApp { inherit system; };
        default = trace;
        init = fork.mkCliApp {
          inherit system;
          command = [ "init" ];
        };
        verify = fork.mkVerifyApp { inherit system; };
      });

      # `nix flake check`: the package (its import check), and the CLI run inside the sandbox
      checks = forAllSystems (
        system:
        let
          pkgs = pkgsFor system;
          trace = traceFor pkgs;
        in
        {
          inherit trace;
          cli = pkgs.runCommand "trace-cli-check" { } ''
            ${trace}/bin/trace --version > version
            ${trace}/bin/trace schema candidate > $out
            grep -q '"rationale"' $out
          '';
        }
      );

      devShells = forAllSystems (system: {
        default = (pkgsFor system).callPackage ./nix/shell.nix { };
      });

      lib = { inherit (fork) addApps mkVerifyApp mkCliApp; };

      overlays.default = final: prev: { trace = final.callPackage ./nix/package.nix { }; };

      templates = rec {
        fork = {
          path = ./nix/templates/fork;
          description = "nixpkgs fork: `nix run .#verify` checks the fix candidates in trace/";
          welcomeText = ''
            Added flake.nix and trace/. Set `inputs.trace.url` in flake.nix to where you get
            trace from. A fork that already has a flake.nix (every nixpkgs fork): run
            `nix run <trace>#init -- --trace-url <trace>` instead, which adds trace/, the flake
            lines, `.trace/` to .gitignore, locks and stages. Then commit and `nix run .#verify`.
          '';
        };
        default = fork;
      };
    };
}
