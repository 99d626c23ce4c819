# Compiler wrappers injected into a package's build from trace's side (never editing the
# package): a directory of `compilers` (cc, gcc, ...), each the shared prelude ccwrap.sh (find
# the next compiler of that name on PATH) followed by `script`, put first on PATH (once) by
# preConfigure (CMake and Meson resolve the compiler there) and preBuild. The package's old hooks
# run after ours; `extra` adds the caller's own overrides (old: { ... }), `install` shell lines
# run in the wrappers' derivation ($out) before the wrappers are written.
# Used by templates/verify/cc-record (the compile recorder) and templates/gates/fuzz-cc (the
# fuzzing gate's coverage compiler).
{ pkgs }:
{ name, script, compilers, drv, install ? "", extra ? old: { } }:
let
  shell = if pkgs ? runtimeShell then pkgs.runtimeShell else "${pkgs.busybox}/bin/sh";
  wrappers = pkgs.runCommand name { inherit script; prelude = ./ccwrap.sh; } ''
    mkdir -p $out/bin
    ${install}
    for c in ${toString compilers}; do
      { echo "#!${shell}"; cat "$prelude" "$script"; } > $out/bin/$c
      chmod +x $out/bin/$c
    done
  '';
  onPath = ''
    case ":$PATH:" in
      *":${wrappers}/bin:"*) ;;
      *) export PATH="${wrappers}/bin:$PATH" ;;
    esac
  '';
in
drv.overrideAttrs (old: {
  preConfigure = onPath + (old.preConfigure or "");
  preBuild = onPath + (old.preBuild or "");
} // extra old)
