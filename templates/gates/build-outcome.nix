# A build whose failure is an outcome, not an error: runs the derivation's own builder (a POSIX
# shell in nixpkgs' stdenv and in the fixture fork) with its own arguments; when it fails, every
# output is replaced by an empty directory and $out/.trace-build-failed holds the exit status.
# (nixpkgs' testers.testBuildFailure does the same for builds that must fail.)
{ pkgs, drv, suffix }:
let
  a = drv.drvAttrs;
in
derivation (a // {
  name = "${a.name}-${suffix}";
  args = [ "-c" ''
    "$traceBuilder" "$@" && exit 0
    rc=$?
    for o in ''${outputs:-out}; do
      eval "d=\$$o"
      $traceTools/bin/rm -rf "$d"
      $traceTools/bin/mkdir -p "$d"
    done
    echo "$rc" > "$out/.trace-build-failed"
  '' "trace-build-wrapper" ] ++ (a.args or [ ]);
  traceBuilder = a.builder;
  traceTools = pkgs.busybox;
})
