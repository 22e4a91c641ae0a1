"""Lowering of a gathered LOAD (fast/ops.py `LazyOp`: a LOAD with one source, the index).

The LOAD's view has one axis more than the kernel, the last, of the gathered size n
(engine/gathers.py builds it). For a group of lanes, `gathered_load` turns the index value (a
scalar shared by every lane, or one lane each) into a position along that axis and reads the view
there, through the lowering's own access classification: lanes that share one index and read
consecutive elements become one vector load (an embedding row), others one load per lane.

Invariant: the position is computed in int64 from any integer dtype, a negative value (signed
dtypes) plus n once, then clamped into [0, n - 1] (`gather_position`), and the load is guarded by
`n > 0` when n may be 0; so the read is inside the view's buffer whatever the index buffer holds.
The engine raises IndexError for indices outside [-n, n) before the kernel runs (engine/gathers.py),
so on every launch that completes the clamp changes nothing.
"""
from __future__ import annotations

from fast.codegen.ir import INT64, IndexOps
from fast.codegen.lower_lanes import Group, LaneLowering
from fast.dtype import dtypes
from fast.ops import BinaryOps, LazyOp, TernaryOps, UnaryOps
from fast.shape.symbolic import Node, NumNode, Variable, as_node


def gathered_load(lowering: LaneLowering, node: LazyOp, group: Group, index: int) -> int:
    """The gathered LOAD `node` for the lanes of `group`, `index` being its source's value."""
    b, st, dtype, ix = lowering.builder, node.arg.st, node.arg.dtype, lowering.indexes
    n = as_node(st.shape[-1])
    uniform = b.dtype(index).count == 1
    positions = [gather_position(lowering, b.gep(index, lane), n) for lane in range(1 if uniform else len(group))]
    places = [st.expr_idxs([*lowering._idxs(env), positions[0 if uniform else lane]])
              for lane, env in enumerate(group)]
    kind, places = lowering._kind(places, dtype)
    nonempty = b.index(IndexOps.CMPLT, b.const(0, INT64), ix.render_int(n)) if n.min < 1 else None

    def valid_ref(valid: Node) -> int | None:
        return ix.valid_ref(valid) if nonempty is None else ix.both(nonempty, valid)
    if kind == "vector":
        return b.load(node.arg.idx, dtype.vec(len(group)), ix.render_int(places[0][0]), valid_ref(places[0][1]))
    return b.vectorize([b.load(node.arg.idx, dtype, ix.render_int(place), valid_ref(valid))
                        for place, valid in (places[:1] if kind == "uniform" else places)])


def gather_position(lowering: LaneLowering, value: int, n: Node) -> Node:
    """A Variable in [0, n) standing for the int `value` as a position along an axis of size n (its
    instruction in `lowering.var_refs`): in int64, a negative value of a signed dtype plus n, then
    clamped into [0, n - 1] (0 when n is 0); an unsigned value of 2^63 and more becomes n - 1."""
    b = lowering.builder
    if n.max <= 1:
        return NumNode(0)
    signed = not dtypes.is_unsigned(b.dtype(value))
    value, size, zero = b.alu(UnaryOps.CAST, (value,), INT64), lowering.indexes.render_int(n), b.const(0, INT64)
    negative = b.alu(BinaryOps.CMPLT, (value, zero))
    value = b.alu(TernaryOps.WHERE, (negative, b.alu(BinaryOps.ADD, (value, size)) if signed else size, value))
    top = b.alu(BinaryOps.ADD, (size, b.const(-1, INT64)))
    value = b.alu(TernaryOps.WHERE, (b.alu(BinaryOps.CMPLT, (value, size)), value, top))
    position = Variable(f"gather{len(lowering.var_refs)}~", 0, n.max - 1)
    lowering.var_refs[position] = b.alu(BinaryOps.MAX, (value, zero))
    return position
