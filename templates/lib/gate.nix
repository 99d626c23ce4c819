# The gate runner, written once: `python3 -S -B -m trace_sandbox.gates.main GATE ARGS` with the
# byte-compiled sandbox package on PYTHONPATH (`-S`: no site, the gates are stdlib only; `-B`:
# the store is read-only), its configuration as JSON in TRACE_GATE_CONFIG.
#
# `command gate args`: the shell command alone (a template that runs a gate inside another
# derivation's phase). `run { name, gate, config, args, mkdir, attrs }`: a derivation of its own;
# `args` defaults to $out/outcome.json (a GateRecord), `mkdir` creates $out first (false for a
# gate that creates $out itself), `attrs` are further attributes of the derivation, `config`
# null: no TRACE_GATE_CONFIG. `reasons`: the reason catalogue (policy/reasons.toml, the gate
# kind's `reasons` input) for a gate that reports rules: its `[[rules]]` are the gate's rule
# table (trace_sandbox/gates/codes.py reads it from TRACE_GATE_REASONS): as JSON, made from the
# catalogue once by `rulesOf`, a derivation every gate step of every verify shares (the same
# expression: Nix builds it once per catalogue), so no gate step imports tomllib to parse it.
{ pkgs, sandbox }:
let
  command = gate: args:
    "PYTHONPATH=${sandbox} ${pkgs.python3}/bin/python3 -S -B -m trace_sandbox.gates.main ${gate} ${args}";
  rulesOf = reasons: pkgs.runCommand "trace-gate-rules" { inherit reasons; } ''
    mkdir -p $out
    ${command "rules-json" "$reasons $out/rules.json"}
  '';
in
{
  inherit command;
  run = { name, gate, config ? null, args ? "$out/outcome.json", mkdir ? true, attrs ? { }, reasons ? null }:
    pkgs.runCommand name
      (attrs
        // (if config == null then { } else { TRACE_GATE_CONFIG = builtins.toJSON config; })
        // (if reasons == null then { } else { TRACE_GATE_REASONS = "${rulesOf reasons}/rules.json"; }))
      ''
        ${if mkdir then "mkdir -p $out" else ""}
        ${command gate args}
      '';
}
