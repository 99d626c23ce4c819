# The central claim, written once: `package` (pkgs.<package> as the package set defines it) with
# `patches` appended to its own through overrideAttrs, and nothing else changed. `extra old`:
# further attributes (coverage flags, a kept test phase), merged after the patches.
# The post-fix build, the patched source, every mutant, the coverage build and the post-fix
# package tests are all this expression: a patch applies the same way in each.
{ package, patches, extra ? (old: { }) }:
package.overrideAttrs (old: { patches = (old.patches or [ ]) ++ patches; } // extra old)
