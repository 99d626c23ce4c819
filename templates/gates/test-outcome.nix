# A test build whose result is an outcome: runs the derivation's own builder with its own
# arguments, keeping the builder's log and exit status; every output is then replaced by an
# empty directory and $out holds `log` and `status` (the regression gate reads them). Like
# build-outcome.nix, but the log is kept whether the build passed or failed.
{ pkgs, drv, suffix }:
let
  a = drv.drvAttrs;
in
derivation (a // {
  name = "${a.name}-${suffix}";
  args = [ "-c" ''
    "$traceBuilder" "$@" > "$NIX_BUILD_TOP/.trace-test.log" 2>&1
    rc=$?
    for o in ''${outputs:-out}; do
      eval "d=\$$o"
      $traceTools/bin/rm -rf "$d"
      $traceTools/bin/mkdir -p "$d"
    done
    $traceTools/bin/cp "$NIX_BUILD_TOP/.trace-test.log" "$out/log"
    echo "$rc" > "$out/status"
  '' "trace-test-wrapper" ] ++ (a.args or [ ]);
  traceBuilder = a.builder;
  traceTools = pkgs.busybox;
})
