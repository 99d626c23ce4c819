# A build whose failure is an outcome, not an error: runs the derivation's own builder (a POSIX
# shell in nixpkgs' stdenv and in the fixture fork) with its own arguments; when it fails, every
# output is replaced by an empty directory and $out/.trace-build-failed holds the exit status;
# when it passes, a .trace-build-failed the package's own install put at the top of $out is
# removed (readers take the marker as the wrapper's word: a package must not be able to forge it).
# (nixpkgs' testers.testBuildFailure does the same for builds that must fail.)
# keepLog = true (the regression gate's test builds): the builder's log is kept too, and every
# output is replaced whether it passed or failed: $out/log and $out/status.
# Nothing is read from the environment: the builder, the tools and the outputs (placeholders,
# which Nix rewrites in `args`) are in the script itself, so packages with
# `__structuredAttrs = true` (whose attributes are not environment variables) work too.
# reruns (keepLog only): when the build fails, it runs again up to this many times in this same
# derivation (no derivation per rerun: one that is not needed costs nothing), each in a fresh
# build directory (NIX_BUILD_TOP and TMPDIR under the first one's, the structured attributes
# copied in), its outputs removed first, with TRACE_TESTS_RERUN=<its index> in its environment;
# $out/rerun-<i>/ holds its `log` and `status`, or `skipped` (status 0, empty log) when the run
# before it passed.
# after: shell run last, once the outputs are written (a reused result too), its failure the
# derivation's (the regression gate writes its tests record into $out here: a derivation of its
# own for the record cost a sandbox). Empty: the script is what it was without it.
{ pkgs, drv, suffix, keepLog ? false, reruns ? 0, reuse ? null, after ? "" }:
let
  a = drv.drvAttrs;
  tools = "${pkgs.busybox}/bin";
  out = placeholder "out";
  run = if keepLog
    then ''"${a.builder}" "$@" > "$NIX_BUILD_TOP/.trace-build.log" 2>&1''
    else ''"${a.builder}" "$@" && { ${unforge} exit 0; }'';
  # A build that passed never carries the failure marker: a package whose own install wrote
  # $out/.trace-build-failed (a patch's forgery: the library side or a mutant would read "did not
  # build") has it removed, and the build log says so. Only this wrapper writes the marker, and
  # only after the outputs were emptied.
  unforge = ''
    if [ -e "${out}/.trace-build-failed" ] || [ -L "${out}/.trace-build-failed" ]; then
      echo "trace: the build installed \$out/.trace-build-failed, a name trace keeps for a failed build's outcome: removed (the build passed)" >&2
      ${tools}/rm -rf "${out}/.trace-build-failed"
    fi
  '';
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
  outputs = a.outputs or [ "out" ];
  indices = builtins.genList (i: i + 1) reruns;
  # rerun i: only when the run before it failed (its status in $last)
  again = i: ''
    if [ "$last" != 0 ]; then
      ${builtins.concatStringsSep "" (map (o: "${tools}/rm -rf \"${placeholder o}\"\n") outputs)}
      d="$top/.trace-rerun-${toString i}"
      ${tools}/mkdir "$d"
      for f in "$top"/.attrs.*; do [ -e "$f" ] && ${tools}/cp -p "$f" "$d/"; done
      ( cd "$d" && export NIX_BUILD_TOP="$d" TMPDIR="$d" TEMPDIR="$d" TMP="$d" TEMP="$d" \
          TRACE_TESTS_RERUN=${toString i} && "${a.builder}" "$@" ) > "$top/.trace-rerun-${toString i}.log" 2>&1
      last=$?
      echo "$last" > "$top/.trace-rerun-${toString i}.status"
    fi
  '';
  keepRerun = i: let r = "${out}/rerun-${toString i}"; t = "$top/.trace-rerun-${toString i}"; in ''
    ${tools}/mkdir -p "${r}"
    if [ -e "${t}.status" ]; then
      ${tools}/cp "${t}.log" "${r}/log"
      ${tools}/cp "${t}.status" "${r}/status"
    else
      echo skipped > "${r}/skipped"
      echo 0 > "${r}/status"
      : > "${r}/log"
    fi
  '';
  rerunAll = if keepLog then ''
    top="$NIX_BUILD_TOP"
    last=$rc
  '' + builtins.concatStringsSep "" (map again indices) else "";
  keepReruns = if keepLog then builtins.concatStringsSep "" (map keepRerun indices) else "";
  shared = if reuse == null then "" else ''
    if [ -e "${reuse.when}" ]; then
      ${resets}
      ${tools}/cp -r "${reuse.from}/." "${out}/"
      echo "${reuse.from}" > "${out}/reused"
      ${after}exit 0
    fi
  '';
in
derivation (a // {
  name = "${a.name}_${suffix}";
  args = [ "-c" (shared + ''
    ${run}
    rc=$?
    ${rerunAll}
    ${resets}
    ${record}
    ${keepReruns}
  '' + after) "trace-build-wrapper" ] ++ (a.args or [ ]);
})
