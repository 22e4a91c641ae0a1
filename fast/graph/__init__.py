"""The graph layer: lazy buffers (node.py) and buffers sharded over devices (multi.py)."""
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer, from_numpy

__all__ = ["LazyBuffer", "MultiLazyBuffer", "from_numpy"]
