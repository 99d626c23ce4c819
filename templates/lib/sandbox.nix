# trace's sandbox package (trace_sandbox/: stdlib-only Python, the gates and the verify harness)
# byte-compiled ONCE, in a derivation of its own that every step using it shares (the same
# expression in each template: Nix builds it once, and a later verify of any candidate finds it
# built). Before, every gate and run step copied the .py files and its interpreter compiled each
# module it imported, in every step (`-B` only stops it writing .pyc).
#
# `src`: the trace_sandbox directory. $out/trace_sandbox/ is the package under its one import
# name: gates run as `PYTHONPATH=$out python3 -S -B -m trace_sandbox.gates.main`, the harness as
# `python3 -I -S $out/trace_sandbox/harness` (its __main__ puts $out on sys.path).
#
# Deterministic: `unchecked-hash` .pyc name their source by its hash, never by an mtime, and are
# loaded without being checked against it (the store is immutable); PYTHONHASHSEED=0 fixes the
# order of set constants in the code objects; the modules are compiled in one process in a fixed
# order. A rebuild is byte-identical. The interpreter is pkgs.python3, the one every step runs.
{ pkgs, src }:
pkgs.runCommand "trace-sandbox" {
  inherit src;
  PYTHONHASHSEED = "0";
} ''
  dest="$out/trace_sandbox"
  mkdir -p "$dest"
  cp -R "$src"/* "$dest"/
  chmod -R u+w "$out"
  "${pkgs.python3}/bin/python3" -S -m compileall -q --invalidation-mode unchecked-hash "$out"
''
