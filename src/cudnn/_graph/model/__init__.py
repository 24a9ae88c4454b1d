"""What a graph is made of: tensors, the node protocol, argument conversion, the graph errors."""
