# A build whose failure is an outcome, not an error: runs the derivation's own builder (a POSIX
# shell in nixpkgs' stdenv and in the fixture fork) with its own arguments; when it fails, every
# output is replaced by an empty directory and $out/.trace-build-failed holds the exit status.
# (nixpkgs' testers.testBuildFailure does the same for builds that must fail.)
# keepLog = true (the regression gate's test builds): the builder's log is kept too, and every
# output is replaced whether it passed or failed: $out/log and $out/status.
{ pkgs, drv, suffix, keepLog ? false }:
let
  a = drv.drvAttrs;
  run = if keepLog
    then ''"$traceBuilder" "$@" > "$NIX_BUILD_TOP/.trace-build.log" 2>&1''
    else ''"$traceBuilder" "$@" && exit 0'';
  record = if keepLog
    then ''
      $traceTools/bin/cp "$NIX_BUILD_TOP/.trace-build.log" "$out/log"
      echo "$rc" > "$out/status"''
    else ''echo "$rc" > "$out/.trace-build-failed"'';
in
derivation (a // {
  name = "${a.name}-${suffix}";
  args = [ "-c" ''
    ${run}
    rc=$?
    for o in ''${outputs:-out}; do
      eval "d=\$$o"
      $traceTools/bin/rm -rf "$d"
      $traceTools/bin/mkdir -p "$d"
    done
    ${record}
  '' "trace-build-wrapper" ] ++ (a.args or [ ]);
  traceBuilder = a.builder;
  traceTools = pkgs.busybox;
})
