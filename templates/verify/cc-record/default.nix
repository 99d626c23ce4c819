# trace's compile recording, injected from trace's side into BOTH builds of a candidate (the
# pre-fix and the post-fix package-build steps, templates/verify/build.nix.j2), never relying on
# the package. `trace.ccwrap` (templates/lib/ccwrap.nix) puts record.sh as cc, gcc, c++, g++,
# clang and clang++ first on PATH from preConfigure and preBuild (once); each call is logged,
# then the stdenv's own compiler wrapper of that name runs it unchanged (nixpkgs' cc-wrapper,
# which adds NIX_CFLAGS_COMPILE & co: the record carries those variables too). Already at
# configure time, because CMake and Meson resolve the compiler's path there. Here:
#   postFixup: the log kept as $out/nix-support/trace-cc.log (empty when nothing compiled).
# Both are nixpkgs stdenv hooks (the default buildPhase and fixupPhase run them; the fixture
# stdenv runs them around its phases); the old hooks run after ours. The package's own
# files are never edited, and the two builds differ only by the candidate's patches, as before.
# The log is part of the output, so it is covered by the post-fix build's `--check` (it is
# deterministic: argv, the sandbox's cwd and the flag variables) and the detector gate reads it
# from the builds the verify pipeline already made (no extra build).
{ trace, drv, ... }:
trace.ccwrap {
  name = "trace-cc-record";
  script = ./record.sh;
  compilers = [ "cc" "gcc" "c++" "g++" "clang" "clang++" ];
  inherit drv;
  extra = old: {
    postFixup = ''
      mkdir -p "$out/nix-support"
      if [ -e "$NIX_BUILD_TOP/.trace-cc.log" ]; then
        cp "$NIX_BUILD_TOP/.trace-cc.log" "$out/nix-support/trace-cc.log"
      else
        : > "$out/nix-support/trace-cc.log"
      fi
    '' + (old.postFixup or "");
  };
}
