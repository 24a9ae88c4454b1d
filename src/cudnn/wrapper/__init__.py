"""``cudnn.Graph``, the high-level wrapper: record ops on real tensors, build on leaving the
``with`` block, then call the graph like a function.

names: recording ops and resolving tensor names; calls: executing (allocation, streams,
workspace); context: the Graph class that ties them together; default_handle: the official
module's get_default_handle / destroy_default_handle.
"""

from .context import Graph
from .default_handle import destroy_default_handle, get_default_handle

__all__ = ["Graph", "destroy_default_handle", "get_default_handle"]
