# Stdlib-only Python modules byte-compiled ONCE, in a derivation of their own that every step
# using them shares (the same expression in each template: Nix builds it once, and a later verify
# of any candidate finds it built). Before, every gate and run step copied the .py files and its
# interpreter compiled each module it imported, in every step (`-B` only stops it writing .pyc).
#
# `src`: a directory of modules. `package`: the name they are imported as (engine/gates/core is
# `trace_gates`: $out/trace_gates/, put on PYTHONPATH), or null for a directory run as
# `python3 DIR` (the verify harness: $out is DIR itself, its files unchanged).
#
# Deterministic: `unchecked-hash` .pyc name their source by its hash, never by an mtime, and are
# loaded without being checked against it (the store is immutable); PYTHONHASHSEED=0 fixes the
# order of set constants in the code objects; the modules are compiled in one process in a fixed
# order. A rebuild is byte-identical. The interpreter is pkgs.python3, the one every step runs.
{ pkgs, src, package ? null }:
pkgs.runCommand (if package == null then "trace-harness" else "trace-gates") {
  inherit src;
  PYTHONHASHSEED = "0";
} ''
  dest="$out${if package == null then "" else "/${package}"}"
  mkdir -p "$dest"
  cp -R "$src"/* "$dest"/
  chmod -R u+w "$out"
  "${pkgs.python3}/bin/python3" -S -m compileall -q --invalidation-mode unchecked-hash "$out"
''
