"""Scalar constants as kernel parameters: the keys that tell kernels apart by structure alone, the
bit patterns realize passes, and the IR that rebuilds each value from its parameter.

A kernel AST's CONST leaves (`BufferOps.CONST` with a `ConstBuffer`) are grouped into *slots*: one
slot per distinct (dtype, bit pattern), numbered in AST walk order (`LazyOp.walk`, sources before
users) by first appearance. `kernel_keys` gives, in one walk:
- `structure`: the AST with every constant value replaced by its slot number (dtypes and views
  kept). Two ASTs with equal structures differ at most in the values of their slots; keeping the
  slot numbers (which leaves hold equal values) keeps any value-equality the lowering may rely on,
  e.g. merging two reduces that are structurally equal (`lower.analyze`).
- `bits`: each slot's value as an int64 bit pattern (below), the parameters of a parametrized kernel.
`(structure, bits)` is equal exactly when the ASTs are equal with bit-identical constants.

Bit patterns (`const_bits`), and their inverse in IR (`rebuild`), where `var` is the int64 parameter:
    float32            bits of the float32, 0 <= b < 2^32    BITCAST(CAST(var, uint32), float32)
    float64            bits of the double, as int64          BITCAST(var, float64)
    float16 / bfloat16 the 16-bit pattern (as the renderers   BITCAST(CAST(var, uint16), T)
                       render inline constants)
    integers           the value wrapped to int64            CAST(var, T)  (wraps)
    bool               0 or 1                                CAST(var, bool)
The pattern is exact: -0.0, NaN payloads (as far as the stored Python value holds them), int64 MIN.
Parameters are named `const<slot>~` (names ending in '~' are reserved for lowering).
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from fast.codegen.builder import IRBuilder
from fast.dtype import DType, dtypes
from fast.ops import BufferOps, LazyOp, UnaryOps, float32_to_bfloat16_bits, normalize_const, wrap_int

_FLOAT32 = struct.Struct("<f")
_FLOAT64 = struct.Struct("<d")
_UINT32 = struct.Struct("<I")
_INT64 = struct.Struct("<q")


def const_name(slot: int) -> str:
    """The kernel parameter name of constant slot `slot`."""
    return f"const{slot}~"


def const_bits(value: Any, dtype: DType) -> int:
    """The int64 bit pattern that carries a CONST of `dtype` (module docstring)."""
    value = normalize_const(value, dtype)
    if dtype == dtypes.float32:
        return int(_UINT32.unpack(_FLOAT32.pack(value))[0])
    if dtype == dtypes.float64:
        return int(_INT64.unpack(_FLOAT64.pack(value))[0])
    if dtype == dtypes.float16:
        return int(np.array(value, np.float16).view(np.uint16))
    if dtype == dtypes.bfloat16:
        return float32_to_bfloat16_bits(float(value))
    return wrap_int(int(value), dtypes.int64)


def rebuild(builder: IRBuilder, var: int, dtype: DType) -> int:
    """IR for the value of `dtype` whose bit pattern is the int64 value `var`."""
    if dtype == dtypes.float32:
        return builder.alu(UnaryOps.BITCAST, (builder.alu(UnaryOps.CAST, (var,), dtypes.uint32),), dtype)
    if dtype == dtypes.float64:
        return builder.alu(UnaryOps.BITCAST, (var,), dtype)
    if dtype in (dtypes.float16, dtypes.bfloat16):
        return builder.alu(UnaryOps.BITCAST, (builder.alu(UnaryOps.CAST, (var,), dtypes.uint16),), dtype)
    return builder.alu(UnaryOps.CAST, (var,), dtype)


class Structure:
    """A kernel AST's structure (`kernel_keys`): a tuple of (op, arg, source positions), one per node in
    walk order, hashed once (a cache lookup hashes its key several times)."""

    __slots__ = ("nodes", "_hash")

    def __init__(self, nodes: tuple[Any, ...]) -> None:
        self.nodes, self._hash = nodes, hash(nodes)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Structure) and self._hash == other._hash and self.nodes == other.nodes

    def __repr__(self) -> str:
        return f"Structure({len(self.nodes)} nodes)"


def kernel_keys(ast: LazyOp) -> tuple[Structure, tuple[int, ...]]:
    """(structure, bits) of a kernel AST (module docstring), in linear time."""
    structure, slots = kernel_slots(ast)
    return structure, tuple(bits for _, bits in slots)


def kernel_slots(ast: LazyOp) -> tuple[Structure, list[tuple[DType, int]]]:
    """(structure, (dtype, bits) of each constant slot in slot order) of a kernel AST."""
    nodes = ast.walk()
    position = {id(node): index for index, node in enumerate(nodes)}
    slots: dict[tuple[DType, int], int] = {}
    structure = []
    for node in nodes:
        arg = node.arg
        if node.op is BufferOps.CONST:
            slot = slots.setdefault((arg.dtype, const_bits(arg.val, arg.dtype)), len(slots))
            arg = ("const", arg.dtype, arg.st, slot)
        structure.append((node.op, arg, tuple(position[id(src)] for src in node.src)))
    return Structure(tuple(structure)), list(slots)


def const_slots(ast: LazyOp) -> dict[int, int]:
    """id() of every CONST leaf of `ast` -> its slot number (the order of `kernel_keys`' bits)."""
    slots: dict[tuple[DType, int], int] = {}
    found: dict[int, int] = {}
    for node in ast.walk():
        if node.op is BufferOps.CONST:
            found[id(node)] = slots.setdefault((node.arg.dtype, const_bits(node.arg.val, node.arg.dtype)), len(slots))
    return found


def leaf_value(builder: IRBuilder, node: LazyOp, slots: dict[int, int] | None) -> int:
    """The value of CONST leaf `node`: inline, or rebuilt from its parameter when `slots` (from
    `const_slots`) names it. A leaf not in `slots` (one lowering made up) stays inline."""
    dtype = node.arg.dtype
    if slots is None or id(node) not in slots:
        return builder.const(normalize_const(node.arg.val, dtype), dtype)
    return rebuild(builder, builder.define_var(const_name(slots[id(node)])), dtype)


def define_params(builder: IRBuilder, ast: LazyOp) -> dict[int, int]:
    """`const_slots(ast)`, after emitting each slot's parameter and rebuilt value at the builder's
    outermost scope, so that `leaf_value` inside loops reuses them (no per-iteration rebuild)."""
    slots = const_slots(ast)
    for node in ast.walk():
        if id(node) in slots:
            leaf_value(builder, node, slots)
    return slots
