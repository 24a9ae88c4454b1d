"""The normalization op methods of ``pygraph`` (batch, layer, RMS, instance, adaptive layer norm)."""

from __future__ import annotations


class NormOpsMixin:
    """Normalization op methods; ``pygraph`` provides ``_add``, ``_input`` and ``_name``."""
