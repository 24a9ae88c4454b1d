"""The op methods of ``pygraph``, one module per op family."""
