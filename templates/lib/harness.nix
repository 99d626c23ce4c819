# The harness runner, written once: one reproducer run against one build (trace_sandbox/harness,
# `python3 -I -S DIR`: isolated, no site), recording in $out/outcome.json how the target ended.
# `attrs`: the run's environment (target, script, data, run, timeout, ...: the harness's
# docstring); `harness`, `python` and `tools` (busybox and python3 on the reproducer's PATH) are
# set here unless `attrs` names them.
{ pkgs, sandbox }:
{ name, attrs }:
pkgs.runCommand name ({
  harness = "${sandbox}/trace_sandbox/harness";
  python = pkgs.python3;
  tools = [ pkgs.busybox pkgs.python3 ];
} // attrs) ''
  "$python/bin/python3" -I -S "$harness"
''
