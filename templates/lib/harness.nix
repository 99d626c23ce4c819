# The harness runner, written once: one reproducer run against one build (trace_sandbox/harness,
# `python3 -I -S DIR`: isolated, no site), recording in $out/outcome.json how the target ended.
# `attrs`: the run's environment (target, script, data, run, timeout, ...: the harness's
# docstring); `harness`, `python` and `tools` (busybox and python3 on the reproducer's PATH) are
# set here unless `attrs` names them.
# `skip` (optional): { path; label; }, a file of a trace-written output (never the package's
# build: the library-side plan's `unmixed`). When it exists the harness is not started and
# $out/outcome.json is a trace.not-run/v1 record ({schema, run, not_run}) naming `label`.
# Without `skip` the derivation is exactly what it was.
{ pkgs, sandbox }:
{ name, attrs, skip ? null }:
let
  run = ''"$python/bin/python3" -I -S "$harness"'';
  guarded = ''
    if [ -e "$skipPath" ]; then
      ${pkgs.busybox}/bin/mkdir -p "$out"
      printf '{"schema": "trace.not-run/v1", "run": %s, "not_run": "%s exists: the reproducer was not run"}\n' \
        "$run" "$skipLabel" > "$out/outcome.json"
    else
      ${run}
    fi
  '';
in
pkgs.runCommand name ({
  harness = "${sandbox}/trace_sandbox/harness";
  python = pkgs.python3;
  tools = [ pkgs.busybox pkgs.python3 ];
} // attrs // (if skip == null then { } else { skipPath = skip.path; skipLabel = skip.label; }))
  (if skip == null then ''
  ${run}
'' else guarded)
