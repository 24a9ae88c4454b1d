"""``cudnn.Graph``, the high-level wrapper: record ops on real tensors, build on leaving the
``with`` block, then call the graph like a function.

names: recording ops and resolving tensor names; calls: executing (allocation, streams,
workspace); context: the Graph class that ties them together.
"""

from .context import Graph

__all__ = ["Graph"]
