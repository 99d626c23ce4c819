# The fuzzing gate's instrumented build (templates/gates/fuzz-plan.nix.j2): `drv` (the post-fix
# package) with fuzzcc.sh as cc, gcc, c++ and g++ first on PATH from preConfigure and preBuild,
# through `trace.ccwrap` (templates/lib/ccwrap.nix) as templates/verify/cc-record injects its
# recorder: trace adds the coverage flag and runtime from its own side, the package's files and
# build phases are not edited.
{ trace, drv, ... }:
trace.ccwrap {
  name = "trace-fuzz-cc";
  script = ./fuzzcc.sh;
  compilers = [ "cc" "gcc" "c++" "g++" ];
  install = ''
    mkdir -p $out/share
    cp ${./trace_fuzz_rt.c} $out/share/trace_fuzz_rt.c
  '';
  inherit drv;
}
