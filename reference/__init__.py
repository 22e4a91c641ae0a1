"""reference: the executable specification of the lazy-tensor core, op by op with numpy.

The same core API as ``fast`` (``__all__`` is ``fast``'s less the names about kernels, devices and
tooling that only ``fast`` has: ``schedule``, ``compile``, ``Kernel``, ``Device``, ``jit``, ``Captured``,
``debug``, ``xp``; tests/test_api_surface.py checks this), so ``import reference as fast`` runs a
program written against the core; values follow docs/semantics.md exactly. See docs/api.md.
safetensors files: ``safe_load``, ``safe_load_metadata``, ``safe_save`` (reference/safetensors.py).
"""
from reference.dtype import DType, dtypes
from reference.lazy import LazyBuffer, from_numpy
from reference.multi import MultiLazyBuffer
from reference.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from reference.realize import realize, to_numpy
from reference.safetensors import safe_load, safe_load_metadata, safe_save
from reference.shape import Variable

__all__ = ["LazyBuffer", "MultiLazyBuffer", "dtypes", "DType", "LoadOps", "UnaryOps", "BinaryOps", "TernaryOps",
           "ReduceOps", "Variable", "from_numpy", "realize", "to_numpy", "safe_load", "safe_load_metadata", "safe_save"]
