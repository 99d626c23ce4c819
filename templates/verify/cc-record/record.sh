# trace's compile recorder (templates/verify/cc-record): installed as cc, gcc, c++, g++, clang
# and clang++ in a directory put first on PATH by the build's preBuild, after the shared prelude
# (templates/lib/ccwrap.sh: `name`, `next`, `path`, `not_found`). Each call appends one
# record to $NIX_BUILD_TOP/.trace-cc.log (the build's postFixup keeps it as
# $out/nix-support/trace-cc.log), then runs the next compiler of that name on PATH: the stdenv's
# own wrapper (nixpkgs' cc-wrapper, the fixture's), so nothing about the compile changes.
# A record: `call NAME`, `cwd DIR`, the cc-wrapper's flag variables (`env VAR VALUE`: they are
# part of the real command), one `arg A` per argument, `end`. An argument's newline continues it
# on a line of its own (the reader joins lines that start with no known key).
{
  printf 'call %s\n' "$name"
  printf 'cwd %s\n' "$PWD"
  for v in NIX_CFLAGS_COMPILE NIX_CFLAGS_LINK NIX_LDFLAGS; do
    eval "val=\${$v-}"
    printf 'env %s %s\n' "$v" "$val"
  done
  for a in "$@"; do printf 'arg %s\n' "$a"; done
  printf 'end\n'
} >> "${NIX_BUILD_TOP:-/tmp}/.trace-cc.log"
[ -n "$next" ] || not_found "trace's compile recorder"
PATH=$path exec "$next" "$@"
