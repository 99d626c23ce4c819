# trace's coverage compiler for the fuzzing gate (templates/gates/fuzz-cc): installed as cc, gcc,
# c++, g++ in a directory put first on PATH by the fuzzing build's preConfigure/preBuild (the
# package's own build runs unchanged otherwise), after the shared prelude (templates/lib/ccwrap.sh:
# `name`, `self`, `next`, `path`, `not_found`). Each compile gains
# -fsanitize-coverage=trace-pc; each link (no -c, -S, -E) also gains trace's runtime
# (trace_fuzz_rt.c, compiled once per build without the flag), LAST: its fork server's
# constructor must be the executable's last one. Then the next compiler of that
# name on PATH runs (the stdenv's own wrapper). clang has no trace-pc of gcc's shape: not wrapped.
[ -n "$next" ] || not_found "trace's fuzzing compiler"
link=1
for a in "$@"; do
  case "$a" in -c|-S|-E|-M|-MM) link= ;; esac
done
rt=
if [ -n "$link" ]; then
  rt="${NIX_BUILD_TOP:-${TMPDIR:-/tmp}}/.trace-fuzz-rt.o"
  if [ ! -e "$rt" ]; then
    PATH=$path "$next" -x c -O2 -fPIC -fno-sanitize=all -c "$self/../share/trace_fuzz_rt.c" -o "$rt.tmp" && mv "$rt.tmp" "$rt"
  fi
  PATH=$path exec "$next" -fsanitize-coverage=trace-pc "$@" "$rt"
fi
PATH=$path exec "$next" -fsanitize-coverage=trace-pc "$@"
