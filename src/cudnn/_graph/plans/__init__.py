"""Engine-config candidates of a graph and the execution plans built from them."""
