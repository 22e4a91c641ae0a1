"""Tolerance graphs: built on the expected side, alongside the program, with the same package.

For a value v the tolerance graph T(v) is a float64 lazy value of v's shape and placement:
`T == 0` means "compare exactly" (bit-for-bit; NaN equals NaN, -0.0 equals 0.0), `T > 0` is an
absolute bound on |expected - actual|, `T` NaN means "unspecified, skip", `T` inf means "anything
but a mismatch of exact equality may pass". None stands for a graph of zeros (an exact value).
Rules follow docs/semantics.md "What conformance compares": transcendentals 4*eps(T) relative plus
eps(T) absolute; float sums eps(T)*(n+2)*max(1, sum|x|); later ops propagate bounds with interval
arithmetic (plus one rounding of the result); float->int casts mark out-of-range elements NaN.
Every rule uses only the public API, so it works for LazyBuffer and MultiLazyBuffer alike.
"""
from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from conformance.analysis import Info
from conformance.program import Cast, Contiguous, Copy, Elementwise, Movement, Reduce, Shard, Step, StepVisitor
from conformance.vocab import DENORM_MIN, EPS, FLOATS, ITEMSIZE, MAX_FINITE, OP_CLASS, SIGNED, TRANSCENDENTAL

Lazy = Any  # a LazyBuffer or MultiLazyBuffer of some package


class ToleranceBuilder:
    """Builds T(v) for each step on package `pkg` (the expected side)."""

    def __init__(self, pkg: ModuleType) -> None:
        self.pkg = pkg

    # ------------------------------------------------------------ small helpers on lazy values
    def e(self, op: str, *xs: Lazy) -> Lazy:
        return xs[0].e(getattr(getattr(self.pkg, OP_CLASS[op]), op), *xs[1:])

    def f64(self, x: Lazy) -> Lazy:
        return x if x.dtype.name == "float64" else x.cast(self.pkg.dtypes.float64)

    def num(self, like: Lazy, value: float) -> Lazy:
        return like.const(value)

    def add(self, *xs: Lazy | None) -> Lazy | None:
        present = [x for x in xs if x is not None]
        out = present[0] if present else None
        for x in present[1:]:
            out = self.e("ADD", out, x)
        return out

    def mul(self, x: Lazy, y: Lazy) -> Lazy:
        return self.e("MUL", x, y)

    def magnitude(self, x: Lazy) -> Lazy:
        """|x| in float64 with NaN read as 0 (a NaN result is checked by exact equality)."""
        y = self.f64(x)
        return self.e("WHERE", self.e("CMPEQ", y, y), self.e("MAX", y, self.e("NEG", y)), self.num(y, 0.0))

    def finite(self, y: Lazy) -> Lazy:
        """bool: y is neither NaN nor infinite (y - y == 0)."""
        return self.e("CMPEQ", self.e("SUB", y, y), self.num(y, 0.0))

    def ulp(self, out: Lazy, dtype: str) -> Lazy:
        """One rounding of `out` to dtype: eps*|out| + the smallest subnormal."""
        scaled = self.mul(self.magnitude(out), self.num(self.f64(out), EPS[dtype]))
        return self.e("ADD", scaled, self.num(scaled, DENORM_MIN[dtype]))

    def guard(self, tol: Lazy, out: Lazy, dtype: str) -> Lazy:
        """inf where |out| + tol may reach overflow (one side inf, the other finite, is then fine)."""
        reach = self.e("ADD", self.magnitude(out), tol)
        near = self.e("CMPLT", reach, self.num(reach, MAX_FINITE[dtype]))
        return self.e("WHERE", near, tol, self.num(tol, math.inf))

    def or_zero(self, tol: Lazy | None, like: Lazy) -> Lazy:
        return tol if tol is not None else self.num(self.f64(like), 0.0)

    def nan_where(self, mask: Lazy, tol: Lazy | None, like: Lazy) -> Lazy:
        """tol (or 0) where mask is False, NaN (skip) where it is True."""
        zero = self.or_zero(tol, like)
        return self.e("WHERE", mask, self.num(zero, math.nan), zero)

    # ------------------------------------------------------------ per step
    def build(self, step: Step, info: Info, srcs: list[Info], values: list[Lazy], tols: list[Lazy | None],
              out: Lazy) -> Lazy | None:
        """T(out) for `step`, given its source values and their T (None: exact)."""
        if not info.aux:
            return None
        return _StepTolerance(self, info, srcs, values, tols, out).visit(step)

    def _elementwise(self, step: Elementwise, info: Info, srcs: list[Info], values: list[Lazy],
                     tols: list[Lazy | None], out: Lazy) -> Lazy | None:
        op, dtype = step.op, info.dtype
        if op == "WHERE":
            a, b = (self.or_zero(t, v) for t, v in zip(tols[1:], values[1:], strict=True))
            return self.add(self.e("WHERE", values[0], a, b), tols[0])
        if not info.approx:
            return self.add(*tols)
        if op in TRANSCENDENTAL:
            rel = self.mul(self.magnitude(out), self.num(self.f64(out), 4 * EPS[dtype]))
            return self.add(self.e("ADD", rel, self.num(rel, EPS[dtype])), tols[0])
        if op in ("NEG",):
            return tols[0]
        if op == "SQRT":  # |sqrt(x') - sqrt(x)| <= sqrt(|x' - x|) for x, x' >= 0, plus the rounding
            spread = self.e("SQRT", self.or_zero(tols[0], values[0]))
            return self.guard(self.add(spread, self.ulp(out, dtype)), out, dtype)
        if op == "MAX":
            return self.e("MAX", *(self.or_zero(t, v) for t, v in zip(tols, values, strict=True)))
        if op == "MULACC":
            product = self._product(values[0], values[1], tols[0], tols[1], dtype, None)
            tol = self.add(product, tols[2], self.ulp(out, dtype))
        elif op == "MUL":
            tol = self._product(values[0], values[1], tols[0], tols[1], dtype, out)
        elif op == "DIV":
            ratio = self.e("DIV", self.or_zero(tols[0], values[0]), self.magnitude(values[1]))
            tol = self.add(ratio, tols[1], self.ulp(out, dtype))
        else:  # ADD, SUB
            tol = self.add(tols[0], tols[1], self.ulp(out, dtype))
        return self.guard(tol, out, dtype)

    def _product(self, a: Lazy, b: Lazy, ta: Lazy | None, tb: Lazy | None, dtype: str, out: Lazy | None) -> Lazy:
        """Bound on |a*b - a'*b'| plus the rounding of the product (of `out`, or of |a|*|b|)."""
        ma, mb = self.magnitude(a), self.magnitude(b)
        ta0, tb0 = self.or_zero(ta, a), self.or_zero(tb, b)
        cross = self.add(self.mul(ma, tb0), self.mul(mb, ta0), self.mul(ta0, tb0))
        if out is not None:
            rounding = self.ulp(out, dtype)
        else:
            scaled = self.mul(self.mul(ma, mb), self.num(ma, EPS[dtype]))
            rounding = self.e("ADD", scaled, self.num(ma, DENORM_MIN[dtype]))
        return self.e("ADD", cross, rounding)

    def _reduce(self, step: Reduce, info: Info, src: Info, value: Lazy, tol: Lazy | None) -> Lazy | None:
        reduce_op = getattr(self.pkg.ReduceOps, step.op)
        summed = None if tol is None else tol.r(reduce_op, step.axes)
        if step.op == "MAX" or src.dtype not in FLOATS:
            return summed
        count = math.prod(src.shape[a] for a in step.axes)
        y = self.f64(value)
        finite_abs = self.e("WHERE", self.finite(y), self.magnitude(y), self.num(y, 0.0))
        total = finite_abs.r(self.pkg.ReduceOps.SUM, step.axes)
        scale = self.e("MAX", total, self.num(total, 1.0))
        bound = self.add(self.mul(scale, self.num(total, EPS[src.dtype] * (count + 2))), summed)
        safe = self.e("CMPLT", total, self.num(total, MAX_FINITE[src.dtype] * 0.5))
        return self.e("WHERE", safe, bound, self.num(total, math.nan))

    def _cast(self, step: Cast, src: Info, value: Lazy, tol: Lazy | None, out: Lazy) -> Lazy | None:
        if not src.is_float:
            return tol
        y = self.f64(value)
        if step.bitcast:
            mask = self.negate(self.e("CMPEQ", y, y))
            if src.zero_sign:
                mask = self.e("ADD", mask, self.e("CMPEQ", y, self.num(y, 0.0)))
            return self.nan_where(mask, tol, value)
        if step.dtype in FLOATS:
            return tol if not src.approx else self.guard(self.add(tol, self.ulp(out, step.dtype)), out, step.dtype)
        if step.dtype == "bool":
            return tol
        return self.nan_where(self.e("ADD", *self._out_of_range(y, step.dtype)), tol, value)

    def _out_of_range(self, y: Lazy, dtype: str) -> tuple[Lazy, Lazy]:
        """bool masks (too low, too high or NaN) for truncating float64 `y` into integer `dtype`."""
        bits = 8 * ITEMSIZE[dtype]
        if dtype in SIGNED:
            low, high = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
        else:
            low, high = 0.0, 2.0 ** bits
        if bits == 64 and dtype in SIGNED:  # low - 1 is not a float64: valid iff y >= low
            below = self.e("CMPLT", y, self.num(y, low))
        else:  # valid iff y > low - 1 (truncation toward zero)
            below = self.negate(self.e("CMPLT", self.num(y, low - 1), y))
        return below, self.negate(self.e("CMPLT", y, self.num(y, high)))

    def negate(self, mask: Lazy) -> Lazy:
        """Logical not of a bool value."""
        return self.e("CMPEQ", mask, mask.const(False))


class _StepTolerance(StepVisitor[Any]):
    """`visit(step)`: the tolerance of one step's output (`ToleranceBuilder.build`), per step kind."""

    def __init__(self, builder: ToleranceBuilder, info: Info, srcs: list[Info], values: list[Lazy],
                 tols: list[Lazy | None], out: Lazy) -> None:
        self.builder, self.info, self.srcs, self.values, self.tols, self.out = builder, info, srcs, values, tols, out

    def visit_other(self, step: Step) -> Lazy | None:
        return self.tols[-1]  # Assign: the value's tolerance

    def visit_elementwise(self, step: Elementwise) -> Lazy | None:
        return self.builder._elementwise(step, self.info, self.srcs, self.values, self.tols, self.out)

    def visit_reduce(self, step: Reduce) -> Lazy | None:
        return self.builder._reduce(step, self.info, self.srcs[0], self.values[0], self.tols[0])

    def visit_movement(self, step: Movement) -> Lazy | None:
        return None if self.tols[0] is None else getattr(self.tols[0], step.kind)(step.arg)

    def visit_cast(self, step: Cast) -> Lazy | None:
        return self.builder._cast(step, self.srcs[0], self.values[0], self.tols[0], self.out)

    def visit_copy(self, step: Copy) -> Lazy | None:
        return None if self.tols[0] is None else self.tols[0].copy_to_device(step.device)

    def visit_shard(self, step: Shard) -> Lazy | None:
        tol = self.tols[0]
        return None if tol is None else self.builder.pkg.MultiLazyBuffer.from_sharded(tol, step.devices, step.axis)

    def visit_contiguous(self, step: Contiguous) -> Lazy | None:
        return self.tols[0]
