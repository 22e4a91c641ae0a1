"""fast: the production lazy-tensor package (SPEC §1): lazy graphs fused into kernels, compiled, run.

Top-level API: `LazyBuffer`, `MultiLazyBuffer`, `dtypes`, `DType`, the op enums, `Variable`,
`from_numpy`, `realize`, `to_numpy`, `schedule`, `jit` (capture a function's kernels and replay them
on new inputs: fast/captured.py), `compile` (ahead of time: the kernels a realize
would run, compiled, nothing run; fast/engine/compile.py), the `Device` registry, and safetensors files over
DISK: `safe_load`, `safe_load_metadata`, `safe_save` (fast/safetensors.py), and `xp`, the Array API
namespace over lazy buffers (fast/xp/; imported last: it is written against the names above), and `debug`
(fast/debug/: compare with `reference` node by node, graph pictures, GRAPH=1, the DEBUG=2 schedule table).
"""
from fast.captured import Captured, jit
from fast.device import Device
from fast.dtype import DType, dtypes
from fast.engine import realize, schedule, to_numpy
from fast.engine.compile import Kernel, compile
from fast.graph import LazyBuffer, MultiLazyBuffer, from_numpy
from fast.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from fast.safetensors import safe_load, safe_load_metadata, safe_save
from fast.shape.symbolic import Variable

__all__ = ["BinaryOps", "Captured", "DType", "Device", "Kernel", "LazyBuffer", "LoadOps", "MultiLazyBuffer",
           "ReduceOps", "TernaryOps", "UnaryOps", "Variable", "compile", "debug", "dtypes", "from_numpy", "jit",
           "realize", "safe_load", "safe_load_metadata", "safe_save", "schedule", "to_numpy", "xp"]

# last, as both build on the names above: debug (compare, graph pictures, GRAPH=1, DEBUG=2) and xp (the
# Array API front end, written against the public LazyBuffer API)
from fast import debug, xp  # noqa: E402
