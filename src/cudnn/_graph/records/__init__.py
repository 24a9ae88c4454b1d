"""What outlives one build: the plan cache and plans and graphs as bytes."""
