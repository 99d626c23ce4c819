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
#
# Build order. Of the builds that are ready, Nix starts them in the order of their derivation
# names, `.drv` included (its worker keeps waiting goals sorted by name), whatever the order of
# the list it is given. So trace names what it writes by what waits on it:
#   `0-reproducer-run-N`  the PoC's runs (templates/verify/run.nix.j2): nearly every gate
#                         reads them, and the variant plan needs the pre-fix ones;
#   `1-<step>`            the chain to the mutation gate, the longest of a verify: the variant
#                         plan, the variant runs (`1-variant-runs`), the fuzzing plan, the
#                         patched source (the mutants' builds need it) and the mutant runs;
#   `<name>_<what>`       trace's other builds of a package (build-outcome.nix: its test
#                         suites, mutants, coverage, fuzzing and library-side builds) sort after
#                         the package's own `<name>.drv`, the pre-fix and post-fix builds every
#                         step waits on (`-<what>` sorted before it: `-` < `.`).
# A leading digit sorts before the package set's own names; the gate records (`gate-*`,
# `expectation`), which no step waits on, fill the slots the rest leave free. Only names
# change: what each derivation builds is the same (tests/test_build_order.py).
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
