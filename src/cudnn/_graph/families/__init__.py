"""One module per op family; each node is data plus infer / lower / attributes."""
