"""Kernel AST analysis for lowering: structure and shape checks, the reductions a kernel holds, its
buffers and variables (`KernelInfo`), its name and cost estimates. Pure functions of the AST."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

from fast.codegen.ir import BufferInfo
from fast.dtype import DType, dtypes
from fast.ops import BinaryOps, BufferOps, ConstBuffer, KernelOps, LazyOp, ReduceOps, TernaryOps, UnaryOps
from fast.shape.symbolic import Node, Variable, as_node, sint

Env = dict[int, Node]
HALVES = (dtypes.float16, dtypes.bfloat16)


@dataclass(frozen=True)
class KernelInfo:
    """What lowering needs to know about an AST, checked once."""

    stores: tuple[LazyOp, ...]
    reduce: LazyOp | None
    reduce_ids: frozenset[int]  # id() of every AST node equal to `reduce` (the AST may repeat it)
    full_shape: tuple[sint, ...]
    reduce_axes: tuple[int, ...]
    buffers: tuple[BufferInfo, ...]
    variables: tuple[Variable, ...]
    reduces: tuple[LazyOp, ...] = ()  # every distinct reduce, sources first (a row kernel has several)
    reduce_index: dict[int, int] = field(default_factory=dict)  # id() of a reduce node -> its index
    row: bool = False  # a row kernel: STOREs at the full shape, reduced rows read back along the row


def _bit_exact(arg: Any) -> Any:
    """An AST arg as a key that tells constants apart by their bits: `-0.0 == 0.0` and NaN never
    equals itself, so a ConstBuffer's value is keyed by its float64 bits (its dtype's value is exact)."""
    if isinstance(arg, ConstBuffer) and isinstance(arg.val, float):
        return ("const", struct.pack("<d", arg.val), arg.dtype, arg.st)
    return arg


def structural_key(node: LazyOp) -> tuple[Any, ...]:
    """Equal exactly for structurally equal subtrees with bit-identical constants, in linear time
    (hashing or comparing LazyOps directly re-walks shared subtrees once per path)."""
    nodes = node.walk()
    position = {id(n): index for index, n in enumerate(nodes)}
    return tuple((n.op, _bit_exact(n.arg), tuple(position[id(src)] for src in n.src)) for n in nodes)


def node_dtype(node: LazyOp) -> DType:
    """The dtype an AST node produces."""
    if node.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE):
        return node.arg.dtype  # type: ignore[no-any-return]
    if node.op in (UnaryOps.CAST, UnaryOps.BITCAST):
        return node.arg  # type: ignore[no-any-return]
    if node.op in (BinaryOps.CMPLT, BinaryOps.CMPEQ):
        return dtypes.bool
    return node_dtype(node.src[1] if node.op is TernaryOps.WHERE else node.src[0])


def reads_own_output(store: LazyOp) -> bool:
    """Whether the value a STORE writes loads the buffer it writes (an in-place `out += x`): such an
    output cannot hold a kernel's partial results between chunks."""
    return any(node.op is BufferOps.LOAD and node.arg.idx == store.arg.idx for node in store.src[0].walk())


def _check_leaf_shapes(nodes: list[LazyOp], allowed: tuple[tuple[sint, ...], ...], where: str) -> None:
    for node in nodes:  # a gathered LOAD (one source) has one more axis, the last (fast/ops.py LazyOp)
        if node.op not in (BufferOps.LOAD, BufferOps.CONST):
            continue
        if (node.arg.st.shape[:-1] if node.src else node.arg.st.shape) not in allowed:
            raise ValueError(f"lower: {node.op.name} {where} has shape {node.arg.st.shape}, expected one of {allowed}")


def _collect_buffers(nodes: list[LazyOp]) -> tuple[BufferInfo, ...]:
    found: dict[int, BufferInfo] = {}
    for node in nodes:
        if node.op not in (BufferOps.LOAD, BufferOps.STORE):
            continue
        buf, is_output = node.arg, node.op is BufferOps.STORE
        info = BufferInfo(buf.idx, buf.dtype, is_output, buf.st.real_size())
        old = found.get(buf.idx)
        if old is not None:
            if old.dtype != buf.dtype:
                raise ValueError(f"lower: buffer {buf.idx} used as {old.dtype.name} and {buf.dtype.name}")
            info = BufferInfo(buf.idx, buf.dtype, old.is_output or is_output, max(old.size, info.size))
        found[buf.idx] = info
    buffers = tuple(found[idx] for idx in sorted(found))
    outputs = [b.idx for b in buffers if b.is_output]
    if [b.idx for b in buffers] != list(range(len(buffers))) or outputs != list(range(len(outputs))):
        raise ValueError(f"lower: buffer indices {sorted(found)} must be 0..n-1 with the outputs {outputs} first")
    return buffers


def _reduces(nodes: list[LazyOp]) -> tuple[list[LazyOp], dict[int, int]]:
    """The distinct reduces (structurally equal nodes are one), sources first, and each node's index."""
    index: dict[tuple[Any, ...], int] = {}
    reduces: list[LazyOp] = []
    ids: dict[int, int] = {}
    for node in nodes:
        if isinstance(node.op, ReduceOps):
            key = structural_key(node)
            if key not in index:
                index[key] = len(reduces)
                reduces.append(node)
            ids[id(node)] = index[key]
    return reduces, ids


def _reduce_shape(reduce: LazyOp) -> tuple[tuple[sint, ...], tuple[int, ...]]:
    """(full shape, axes) of a reduce, checked."""
    leaf = next((node for node in reduce.walk() if node.op in (BufferOps.LOAD, BufferOps.CONST) and not node.src),
                None)
    if leaf is None:
        raise ValueError(f"lower: {reduce.op.name} reduces nothing (no LOAD or CONST below it)")
    full_shape, axes = tuple(leaf.arg.st.shape), tuple(reduce.arg)
    if sorted(set(axes)) != sorted(axes) or not all(isinstance(a, int) and 0 <= a < len(full_shape) for a in axes):
        raise ValueError(f"lower: {reduce.op.name} axes {axes} are not distinct axes of {full_shape}")
    return full_shape, axes


def _check_shapes(nodes: list[LazyOp], stores: tuple[LazyOp, ...], reduces: list[LazyOp]) -> tuple[Any, ...]:
    """(full shape, reduce axes, row kernel?) after checking every leaf and STORE shape."""
    if not reduces:
        full_shape = tuple(stores[0].arg.st.shape)
        _check_leaf_shapes(nodes, (full_shape,), "in an elementwise kernel")
        return full_shape, (), False
    full_shape, axes = _reduce_shape(reduces[0])
    output_shape = tuple(1 if a in axes else s for a, s in enumerate(full_shape))
    row = output_shape != full_shape and tuple(stores[0].arg.st.shape) == full_shape
    for reduce in reduces:
        if _reduce_shape(reduce) != (full_shape, axes):
            raise ValueError(f"lower: reductions over different rows in one kernel: {_reduce_shape(reduce)} "
                             f"and {(full_shape, axes)}")
        _check_leaf_shapes(reduce.walk(), (full_shape,), f"below {reduce.op.name}")
    below_ids = {id(node) for reduce in reduces for node in reduce.walk()}
    _check_leaf_shapes([n for n in nodes if id(n) not in below_ids], (full_shape,) if row else
                       (full_shape, output_shape), f"above {reduces[0].op.name}")
    for store in stores:
        if tuple(store.arg.st.shape) != (full_shape if row else output_shape):
            raise ValueError(f"lower: STORE to buffer {store.arg.idx} has shape {store.arg.st.shape}, "
                             f"expected {full_shape if row else output_shape}")
    return full_shape, axes, row


def analyze(ast: LazyOp) -> KernelInfo:
    """Check the AST's structure and shapes; ValueError naming the problem otherwise."""
    if ast.op is not KernelOps.SINK or not ast.src or any(s.op is not BufferOps.STORE for s in ast.src):
        raise ValueError(f"lower: expected a SINK of STOREs, got {ast.op} with {[s.op for s in ast.src]}")
    nodes = ast.walk()
    reduces, reduce_index = _reduces(nodes)
    stores = tuple(ast.src)
    full_shape, axes, row = _check_shapes(nodes, stores, reduces)
    variables: set[Variable] = set()
    for node in nodes:
        if node.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE):
            variables |= node.arg.st.vars()
    for size in full_shape:
        variables |= as_node(size).vars()
    reduce_ids = frozenset(node_id for node_id, index in reduce_index.items() if index == 0)
    return KernelInfo(stores, reduces[0] if reduces else None, reduce_ids, full_shape, axes, _collect_buffers(nodes),
                      tuple(sorted(variables, key=lambda v: v.expr)), tuple(reduces), reduce_index, row)


def kernel_name(info: KernelInfo) -> str:
    dims = [str(size) if isinstance(size, int) else re.sub(r"\W", "_", size.render()) for size in info.full_shape]
    return "_".join(["r" if info.reduce is not None else "E", *dims])


def estimates(info: KernelInfo) -> tuple[int, int]:
    """(flops, bytes) with symbolic sizes at their maximum."""
    full, outputs = 1, 1
    for axis, size in enumerate(info.full_shape):
        full *= as_node(size).max
        outputs *= 1 if axis in info.reduce_axes else as_node(size).max
    below = {id(n) for n in info.reduce.walk()} if info.reduce is not None else set()
    flops = 0
    for store in info.stores:
        for node in store.walk():
            if node.op not in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE):
                flops += full if id(node) in below else outputs
    return flops, sum(b.size * b.dtype.itemsize for b in info.buffers)
