"""Symbolic index expressions (fast/shape/symbolic.py Nodes) as INDEX instructions of the linear IR.

`IndexRenderer` turns the Nodes that lowering builds for buffer indices and validity conditions into
int64 INDEX instructions (bool for conditions), through the lowering's `IRBuilder`. Variables are
kernel parameters or loop counters, looked up in `var_refs` (filled as lowering defines them).
Invariants: all index arithmetic is int64 and never divides by zero (a symbolic divisor that may be
0 in some binding is replaced by max(d, 1); nothing is read then); a floor division of a possibly
negative numerator by a symbolic divisor is shifted into the non-negative range first.
"""
from __future__ import annotations

from fast.codegen.builder import IRBuilder
from fast.codegen.ir import BOOL, INT64, IndexOps
from fast.ops import BinaryOps, UnaryOps
from fast.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable, as_node


class IndexRenderer:
    """Nodes -> INDEX instructions of `builder`; `var_refs` maps each Variable to its instruction."""

    def __init__(self, builder: IRBuilder, var_refs: dict[Variable, int]) -> None:
        self.builder, self.var_refs = builder, var_refs

    def render_int(self, node: Node | int) -> int:
        b, node = self.builder, as_node(node)
        if isinstance(node, NumNode):
            return b.const(node.b, INT64)
        if isinstance(node, Variable):
            if node not in self.var_refs:
                raise ValueError(f"lower: variable {node.expr} is not a kernel variable or loop counter")
            return self.var_refs[node]
        if isinstance(node, SumNode):
            total = self.render_int(node.nodes[0])
            for term in node.nodes[1:]:
                total = b.index(IndexOps.ADD, total, self.render_int(term))
            return total
        if isinstance(node, MulNode):
            return b.index(IndexOps.MUL, self.render_int(node.a), self.render_int(node.b))
        if isinstance(node, (DivNode, ModNode)):
            divisor = as_node(node.b)
            if divisor.min < 0 or divisor.max <= 0:
                raise ValueError(f"lower: cannot index with {node.render()} (divisor must be positive)")
            numerator, rendered = self.render_int(node.a), self.render_int(divisor)
            if divisor.min == 0:  # a size that is 0 in some binding (nothing is read then): divide by max(d, 1)
                small = b.index(IndexOps.CMPLT, rendered, b.const(1, INT64))
                rendered = b.index(IndexOps.ADD, rendered, b.alu(UnaryOps.CAST, (small,), INT64))
            if not isinstance(divisor, NumNode) and node.a.min < 0:
                return self._shifted_floor(node, numerator, rendered, max(divisor.min, 1))
            nonneg = node.a.min >= 0
            op = {(DivNode, True): IndexOps.NONNEG_DIV, (DivNode, False): IndexOps.FLOORDIV,
                  (ModNode, True): IndexOps.NONNEG_MOD, (ModNode, False): IndexOps.FLOORMOD}[(type(node), nonneg)]
            return b.index(op, numerator, rendered)
        if isinstance(node, (LtNode, AndNode)):
            return b.alu(UnaryOps.CAST, (self.render_bool(node),), INT64)
        raise ValueError(f"lower: unsupported index expression {node!r}")

    def _shifted_floor(self, node: DivNode | ModNode, numerator: int, divisor: int, smallest: int) -> int:
        """Floor division or modulo of a numerator that may be negative (down to `node.a.min`) by a
        symbolic divisor of at least `smallest` >= 1: with k = ceil(-min / smallest), a + k*d >= 0, so
        a // d = (a + k*d) // d - k and a % d = (a + k*d) % d, both with the non-negative ops."""
        b, shift = self.builder, -(node.a.min // smallest)
        shifted = b.index(IndexOps.ADD, numerator, b.index(IndexOps.MUL, b.const(shift, INT64), divisor))
        if isinstance(node, ModNode):
            return b.index(IndexOps.NONNEG_MOD, shifted, divisor)
        return b.index(IndexOps.ADD, b.index(IndexOps.NONNEG_DIV, shifted, divisor), b.const(-shift, INT64))

    def render_bool(self, node: Node) -> int:
        b = self.builder
        if isinstance(node, NumNode):
            return b.const(node.b != 0, BOOL)
        if isinstance(node, LtNode):
            return b.index(IndexOps.CMPLT, self.render_int(node.a), self.render_int(node.b))
        if isinstance(node, AndNode):
            result = self.render_bool(node.nodes[0])
            for term in node.nodes[1:]:
                result = b.index(IndexOps.AND, result, self.render_bool(term))
            return result
        value, zero = self.render_int(node), b.const(0, INT64)
        positive, negative = b.index(IndexOps.CMPLT, zero, value), b.index(IndexOps.CMPLT, value, zero)
        return positive if node.min >= 0 else negative if node.max <= 0 else b.alu(BinaryOps.ADD, (positive, negative))

    def valid_ref(self, valid: Node) -> int | None:
        return None if valid.min > 0 or valid.max < 0 else self.render_bool(valid)

    def both(self, condition: int, valid: Node) -> int:
        rendered = self.valid_ref(valid)
        return condition if rendered is None else self.builder.index(IndexOps.AND, condition, rendered)
