"""Beyond one machine, on Nix's own machinery: the machine's cache and builder settings
(`machine`), and `trace push` (`push`, `command`). A thin layer over Nix settings and `nix copy`:
no scheduler of trace's own."""
