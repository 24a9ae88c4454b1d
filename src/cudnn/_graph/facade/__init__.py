"""The parts ``pygraph`` is made of: its plan queries (`plan_queries`), its introspection, JSON
and pictures (`graph_text`), and the state they read (`graph_state`)."""
