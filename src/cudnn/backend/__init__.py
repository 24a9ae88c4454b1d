"""Thin, faithful objects over cuDNN backend descriptors: descriptors, handles, and the
engine/plan/variant-pack helpers built on them."""

from .descriptor import Descriptor, Fraction, attr_label, type_label
from .handle import Handle, create_handle, default_handle, destroy_handle, get_stream, set_stream

__all__ = [
    "Descriptor",
    "Fraction",
    "Handle",
    "attr_label",
    "create_handle",
    "default_handle",
    "destroy_handle",
    "get_stream",
    "set_stream",
    "type_label",
]
