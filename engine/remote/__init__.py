"""Beyond one machine, on Nix's own machinery: `trace push` (`push`) and the determinism claims of
results built elsewhere (`attest`). The machine's cache and builder settings are engine/machine.py
(below engine/nix.py, which reads them); the command line is engine/cli/push.py. A thin layer over
Nix settings and `nix copy`: no scheduler of trace's own."""
