# trace's compiler-wrapper prelude (templates/lib/ccwrap.nix puts it before each wrapper's own
# script): `name` is the compiler this wrapper stands in for (cc, gcc, ...), `self` the wrapper's
# directory, `next` the next compiler of that name on PATH after it (the stdenv's own wrapper;
# empty when there is none) and `path` PATH without the wrapper's directory, to run it with.
# `not_found WHO` says that no compiler was found and exits 127.
name=${0##*/}
self=${0%/*}
next=
path=
saved=$IFS
IFS=:
for d in $PATH; do
  [ "$d" = "$self" ] && continue
  path="${path:+$path:}$d"
  if [ -z "$next" ] && [ -x "$d/$name" ]; then next="$d/$name"; fi
done
IFS=$saved
not_found() {
  echo "$name: not found ($1 found no $name after $self on PATH)" >&2
  exit 127
}
