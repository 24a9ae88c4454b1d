"""A built plan executed: variant packs, bindings and the launch."""
