"""The graph layer (SPEC §1, §4, §5): lazy buffers, their validation and rewrite rules, and buffers
sharded over devices. Building a graph runs nothing; fast/engine/ schedules what is realized.

Exports `LazyBuffer`, `MultiLazyBuffer` and `from_numpy` (fast/__init__.py re-exports them); the
engine and fast/debug/ also use a few internals by module (`node.create`, `versions.check_fresh`, ...).

Modules, in layers. A module imports only modules of lower layers, never one of its own layer or
above, so the package has no import cycle: tests/fast/test_graph_package.py reads every import
statement (inside functions and under `if TYPE_CHECKING:` too) and checks these layers.

0. keys.py          pure helpers: memoised ShapeTrackers, weak-cache keys, normalised constants
   rules.py         pure rewrite rules: constant folding and identities (a table keyed by op), reduce
                    folding, the split-reduce factor; plain values in, a decision out
   checks.py        validation of every LazyBuffer operation, run before anything is built
   versions.py      ordering of assigns: expected versions, stale reads and aliases
1. node.py          LazyBuffer, its weak cache and the constructors every operation builds through
                    (create, const_node, view_of, reapply, redirect, move); it builds the elementwise
                    op, constants and the movement ops itself: the hot path of graph building
2. operations.py    the longer operations: folds applied to the graph, reduce (folded, split), cast,
                    bitcast, contiguous, copy_to_device, assign; and from_numpy
   gather.py        gather (an indexed read along one axis: the node `xp.take` builds)
   allreduce.py     naive and ring all-reduce of per-device LazyBuffers (graphs of copies and adds)
3. multi_checks.py  validation of MultiLazyBuffer arguments and layouts
   products.py      matmul (the expand-multiply-sum the GEMM lowering recognises; a direct builder
                    for the common case)
4. multi.py         MultiLazyBuffer
5. __init__.py      this module: imports node, operations and multi

How the layers stay one-way:
- The lower modules never name the classes above them. checks.py and versions.py read a lazy buffer
  through a Protocol of the fields they use (`checks.Operand`, `versions.Versioned`), which
  LazyBuffer satisfies (mypy checks it at every call); a check that must tell a LazyBuffer from
  anything else takes the class as an argument, passed by the method that validates
  (`checks.check_elementwise(op, operands, LazyBuffer)`; multi_checks' `check_operands(...,
  MultiLazyBuffer)`).
- LazyBuffer's methods reach the longer operations through a table, `node.OPERATIONS`: typed entries
  keyed by operation name (as autodidax keys impl rules by primitive). node.py declares each entry's
  name and signature; operations.py, which builds through node.py's constructors, sets each entry
  right below its definition while this package is imported, before any node can be built. The
  methods validate, then call the entry. (A test planting a bug in an operation must set the table
  entry: the methods do not call the module attribute.)
"""
from fast.graph import gather as _gather  # noqa: F401  (importing it fills node.OPERATIONS.gather)
from fast.graph import products as _products  # noqa: F401  (importing it fills node.OPERATIONS.matmul)
from fast.graph.multi import MultiLazyBuffer
from fast.graph.node import LazyBuffer
from fast.graph.operations import from_numpy  # (importing operations also fills node.OPERATIONS)

__all__ = ["LazyBuffer", "MultiLazyBuffer", "from_numpy"]
