"""The graph layer behind ``cudnn.pygraph``, one subpackage per stage; each imports only the ones
before it in this list (the import contracts in pyproject.toml check it):

- ``model``: what a graph is made of (tensors, the node protocol, argument conversion, errors);
- ``families``: the nodes, one module per op family (validate, expand, lower, JSON);
- ``plans``: engine-config candidates and the execution plans built from them;
- ``run``: a built plan executed (variant packs, bindings, the launch);
- ``build``: a graph's built state and the steps that make it (lowering, plans, autotuning);
- ``text``: a graph as text and back (JSON, pictures, inspection);
- ``records``: what outlives one build (the plan cache, serialized plans);
- ``methods``: the op methods of ``pygraph`` (and their declarations for type checkers);
- ``facade``: the rest of ``pygraph``'s methods, by job (plan queries, the graph as text, shared state);
- ``pygraph``: the builder users call;
- ``plan_worker``: the process that builds plans for a parent's ``build_plans`` (``pygraph`` rebuilds
  the graph there), started only when worker processes are asked for.
"""
