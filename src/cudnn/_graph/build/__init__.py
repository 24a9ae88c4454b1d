"""A graph's built state and the steps that make it: lowering, plans, autotuning."""
