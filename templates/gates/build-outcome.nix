# A build whose failure is an outcome, not an error: runs the derivation's own builder (a POSIX
# shell in nixpkgs' stdenv and in the fixture fork) with its own arguments; when it fails, every
# output is replaced by an empty directory and $out/.trace-build-failed holds the exit status.
# (nixpkgs' testers.testBuildFailure does the same for builds that must fail.)
# keepLog = true (the regression gate's test builds): the builder's log is kept too, and every
# output is replaced whether it passed or failed: $out/log and $out/status.
# Nothing is read from the environment: the builder, the tools and the outputs (placeholders,
# which Nix rewrites in `args`) are in the script itself, so packages with
# `__structuredAttrs = true` (whose attributes are not environment variables) work too.
# after (keepLog only): an earlier run of the same suite; this run is a rerun, made only when that
# one failed (its status is not 0); otherwise it records `skipped` and runs nothing, so a rerun
# of a passing suite costs no build.
# reuse (keepLog only): { when, from }: when the file `when` exists at build time, this run IS
# the build `from` (another wrapped run of the same computation, e.g. the same patch bytes and
# test phases): its log and status are copied and nothing is built; otherwise the derivation
# builds as without it. `from` is an input either way (it is built for its own step anyway).
{ pkgs, drv, suffix, keepLog ? false, after ? null, reuse ? null }:
let
  a = drv.drvAttrs;
  tools = "${pkgs.busybox}/bin";
  out = placeholder "out";
  run = if keepLog
    then ''"${a.builder}" "$@" > "$NIX_BUILD_TOP/.trace-build.log" 2>&1''
    else ''"${a.builder}" "$@" && exit 0'';
  reset = o: ''
    ${tools}/rm -rf "${placeholder o}"
    ${tools}/mkdir -p "${placeholder o}"
  '';
  record = if keepLog
    then ''
      ${tools}/cp "$NIX_BUILD_TOP/.trace-build.log" "${out}/log"
      echo "$rc" > "${out}/status"''
    else ''echo "$rc" > "${out}/.trace-build-failed"'';
  resets = builtins.concatStringsSep "" (map reset (a.outputs or [ "out" ]));
  guard = if after == null then "" else ''
    if [ "$(${tools}/cat "${after}/status")" = 0 ]; then
      ${resets}
      echo skipped > "${out}/skipped"
      echo 0 > "${out}/status"
      : > "${out}/log"
      exit 0
    fi
  '';
  shared = if reuse == null then "" else ''
    if [ -e "${reuse.when}" ]; then
      ${resets}
      ${tools}/cp "${reuse.from}/log" "${out}/log"
      ${tools}/cp "${reuse.from}/status" "${out}/status"
      echo "${reuse.from}" > "${out}/reused"
      exit 0
    fi
  '';
in
derivation (a // {
  name = "${a.name}-${suffix}";
  args = [ "-c" (guard + shared + ''
    ${run}
    rc=$?
    ${resets}
    ${record}
  '') "trace-build-wrapper" ] ++ (a.args or [ ]);
})
