# trace's Nix library: what the step templates share, written once (nixpkgs-review style: static
# .nix files that take arguments). Every template that uses it starts with
#
#   let trace = import {{ inputs.nixlib }} { inherit pkgs; src = {{ inputs.sandbox }}; }; in
#
# (both inputs are the kinds' defaults in graphs/*.toml: `nixlib` = trace:templates/lib,
# `sandbox` = trace:trace_sandbox; `src` may be left out by a template that runs no sandbox code).
#
# - `patched`: the central claim, pkgs.<package> with the candidate's patches appended
#   (patched.nix);
# - `gate` / `gateCommand`: a step running one gate of trace_sandbox.gates.main (gate.nix);
# - `harness`: a step running the verify harness, one reproducer run (harness.nix);
# - `outcome`: a build whose failure is an outcome, not an error (build-outcome.nix);
# - `sandbox`: the sandbox package byte-compiled once (sandbox.nix);
# - `ccwrap`: compiler wrappers first on a build's PATH (ccwrap.nix, ccwrap.sh: the compile
#   recorder templates/verify/cc-record and the fuzzing compiler templates/gates/fuzz-cc).
{ pkgs, src ? null }:
let
  sandbox = import ./sandbox.nix { inherit pkgs src; };
  gates = import ./gate.nix { inherit pkgs sandbox; };
in
{
  inherit sandbox;
  patched = import ./patched.nix;
  gate = gates.run;
  gateCommand = gates.command;
  harness = import ./harness.nix { inherit pkgs sandbox; };
  outcome = import ./build-outcome.nix;
  ccwrap = import ./ccwrap.nix { inherit pkgs; };
}
