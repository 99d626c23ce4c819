# The fuzzing gate's instrumented build (templates/gates/fuzz-plan.nix.j2): `drv` (the post-fix
# package) with fuzzcc.sh as cc, gcc, c++ and g++ first on PATH from preConfigure and preBuild,
# as templates/verify/cc-record injects its recorder: trace adds the coverage flag and runtime
# from its own side, the package's files and build phases are not edited.
{ pkgs, drv }:
let
  shell = if pkgs ? runtimeShell then pkgs.runtimeShell else "${pkgs.busybox}/bin/sh";
  wrappers = pkgs.runCommand "trace-fuzz-cc" { script = ./fuzzcc.sh; runtime = ./trace_fuzz_rt.c; } ''
    mkdir -p $out/bin $out/share
    cp "$runtime" $out/share/trace_fuzz_rt.c
    for c in cc gcc c++ g++; do
      { echo "#!${shell}"; cat "$script"; } > $out/bin/$c
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
})
