"""Planted bugs in fast's optimization layer (plans, lowering, GEMM tiles, constants as parameters,
the FMA guard, schedule replay, vector rendering), each a realistic slip in code that only the
optimized paths run. Every patch returns an undo callable and goes through
`mutants_fast._fresh_kernels`, so no kernel compiled with the bug outlives the patch (the in-memory
caches are swapped out and the disk program store is suspended meanwhile).

Reference has no optimization layer, so these mutants have no reference twin: the mutation harness
hunts them in `fast` with the random programs of the ci profile (conformance/mutation.py).
A missing patch point raises AttributeError: a renamed internal fails the mutation test loudly.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import Any

from conformance.mutants_fast import _fresh_kernels, combine, replace_everywhere, set_attribute

Undo = Callable[[], None]


def _module(fast: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{fast.__name__}.{name}")


def tail_off_by_one(fast: ModuleType) -> Undo:
    """A vectorized axis's scalar remainder starts one position late: its first element is never written."""
    plan_class = _module(fast, "codegen.opt").KernelPlan
    original = plan_class.tail_plan

    def tail_plan(self: Any) -> Any:
        found = original(self)
        if found is None:
            return None
        axes, axis, start = found
        position = self.tail[0]
        shorter = replace(axes[position], size=axes[position].size - 1)
        return (*axes[:position], shorter, *axes[position + 1:]), axis, start + 1
    return _fresh_kernels(fast, set_attribute(plan_class, "tail_plan", tail_plan))


def last_chunk_dropped(fast: ModuleType) -> Undo:
    """A column reduction walked in chunks of rows stops one chunk early (its last rows are never added)."""
    opt = _module(fast, "codegen.opt")
    original = opt._chunk_strided_reduce

    def chunked(plan: Any) -> Any:
        out = original(plan)
        if out.chunk is None or out.chunk[1] < 2:
            return out
        return replace(out, chunk=(out.chunk[0], out.chunk[1] - 1))
    return _fresh_kernels(fast, set_attribute(opt, "_chunk_strided_reduce", chunked))


def thread_remainder_dropped(fast: ModuleType) -> Undo:
    """Thread shares are `count // cores` iterations each: when `cores` does not divide the shared
    loop, its last `count % cores` iterations run on no thread (general lowering and GEMM units)."""
    lanes, gemm_loops = _module(fast, "codegen.lower_lanes"), _module(fast, "codegen.gemm_loops")
    ir = _module(fast, "codegen.ir")
    original_bounds = lanes.LaneLowering._loop_bounds
    original_share = gemm_loops.GemmEmitter.share

    def floor_share(b: Any, total: int, thread_vars: tuple[int, int], one: int) -> tuple[int, int]:
        core, cores = thread_vars
        each = b.index(ir.IndexOps.NONNEG_DIV, total, cores)
        return b.index(ir.IndexOps.MUL, each, core), b.index(ir.IndexOps.MUL, each, b.index(ir.IndexOps.ADD, core, one))

    def loop_bounds(self: Any, count: Any, kind: Any, split: bool = True) -> tuple[int, int]:
        shared = kind is ir.LoopKind.GLOBAL and self.split_pending and self.parallel and split
        start, end = original_bounds(self, count, kind, split)
        if not shared:
            return start, end
        total = self.indexes.render_int(count)
        return floor_share(self.builder, total, self.thread_vars, self.builder.const(1, ir.INT64))

    def share(self: Any, units: int) -> tuple[int, int]:
        start, end = original_share(self, units)
        if not self.ctx.parallel:
            return start, end
        return floor_share(self.b, self.const(units), self.ctx.thread_vars, self.const(1))
    return _fresh_kernels(fast, set_attribute(lanes.LaneLowering, "_loop_bounds", loop_bounds),
                          set_attribute(gemm_loops.GemmEmitter, "share", share))


def gemm_column_edge_dropped(fast: ModuleType) -> Undo:
    """GEMM computes only the full micro-panels: the last `N % NR` columns are never stored."""
    emitter = _module(fast, "codegen.gemm_loops").GemmEmitter
    original = emitter.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.full_panels:
            self.all_panels = self.full_panels
    return _fresh_kernels(fast, set_attribute(emitter, "__init__", init))


def gemm_b_in_place_vectors_swapped(fast: ModuleType) -> Undo:
    """A GEMM that reads B in place (codegen/gemm_pack.py `reads_b_in_place`: a contiguous B of one
    micro-panel) loads its vectors of columns in reverse order: each output vector sums another
    vector of B's columns."""
    emitter = _module(fast, "codegen.gemm_loops").GemmEmitter
    original = emitter.b_columns

    def b_columns(self: Any, panel: Any, step: Any, columns: list[tuple[int, int]]) -> list[int]:
        values = original(self, panel, step, columns)
        same_widths = len({width for _, width in columns}) == 1
        return values[::-1] if self.packed_b is None and same_widths else values
    return _fresh_kernels(fast, set_attribute(emitter, "b_columns", b_columns))


def gemm_row_edge_dropped(fast: ModuleType) -> Undo:
    """GEMM counts blocks of rows as `M // MR`: the last `M % MR` rows of each batch are never computed."""
    emitter = _module(fast, "codegen.gemm_loops").GemmEmitter
    original = emitter.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.m // self.tiles.rows:
            self.blocks = self.m // self.tiles.rows
    return _fresh_kernels(fast, set_attribute(emitter, "__init__", init))


def shared_accumulators(fast: ModuleType) -> Undo:
    """The unrolled output copies of a reduction share the first copy's accumulators: each output
    of a register tile, dot tile or read-stream group gets the running sum of all of them."""
    lowering = _module(fast, "codegen.lower")._Lowering
    original = lowering._lower_reduce

    def lower_reduce(self: Any, reduce: Any, output_groups: Any, *args: Any, **kwargs: Any) -> Any:
        builder, made = self.builder, list[int]()
        copies = self.plan.reduce_axes[-1].unroll if self.plan.reduce_vector else 1
        define = builder.define_acc

        def define_acc(init: Any, dtype: Any) -> int:
            made.append(define(init, dtype) if len(made) < copies else made[len(made) % copies])
            return made[-1]
        builder.define_acc = define_acc
        try:
            return original(self, reduce, output_groups, *args, **kwargs)
        finally:
            del builder.define_acc
    return _fresh_kernels(fast, set_attribute(lowering, "_lower_reduce", lower_reduce))


def swapped_const_slots(fast: ModuleType) -> Undo:
    """A kernel taking its constants as parameters reads slot 0's parameter where slot 1's belongs and
    the other way round (kernels whose constants are inline are unaffected)."""
    const_args = _module(fast, "codegen.const_args")
    original = const_args.define_params

    def define_params(builder: Any, ast: Any) -> dict[int, int]:
        slots = const_args.const_slots(ast)
        swap = {0: 1, 1: 0} if len(set(slots.values())) >= 2 else {}
        slots = {node: swap.get(slot, slot) for node, slot in slots.items()}
        for node in ast.walk():
            if id(node) in slots:
                const_args.leaf_value(builder, node, slots)
        return slots
    return _fresh_kernels(fast, replace_everywhere(fast, "define_params", original, define_params))


def guard_one_bound(fast: ModuleType) -> Undo:
    """The FMA guard checks only `value < bound`: large negative inputs (and -inf) pass, so fused
    products that overflow no longer give the unfused infinities (GEMM tiles, the checks inside
    the tiles of few panels (codegen/gemm_checked.py: the sums of squares add negative values as 0)
    and the engine's scan)."""
    gemm_loops, guard = _module(fast, "codegen.gemm_loops"), _module(fast, "engine.fma_guard")
    checked, ops = _module(fast, "codegen.gemm_checked"), _module(fast, "ops")

    def bounded(self: Any, value: int) -> int:
        dtype = self.b.dtype(value)
        return self.b.alu(ops.BinaryOps.CMPLT, (value, self.b.const(gemm_loops.FMA_BOUNDS[self.dtype], dtype)))

    def square_upper_only(emitter: Any, ok: int, value: int) -> None:
        emitter.b.assign(ok, emitter.b.alu(ops.BinaryOps.MUL, (ok, bounded(emitter, value))))

    def squares_upper_only(emitter: Any, squares: int, value: int) -> None:  # negative values add 0
        b = emitter.b
        zero = b.const(0.0, b.dtype(value))
        kept = b.alu(ops.TernaryOps.WHERE, (b.alu(ops.BinaryOps.CMPLT, (value, zero)), zero, value))
        b.assign(squares, b.fma(kept, kept, squares))

    def upper_only(buffer: Any, dtype: Any) -> bool:
        window = getattr(buffer.handle, "window", None)
        if window is None:
            return False
        raw = window()
        values = raw[:raw.size - raw.size % dtype.itemsize].view(dtype.np)
        return values.size == 0 or bool(values.max() < guard.FMA_BOUNDS[dtype])
    saved = dict(guard._CHECKED)
    guard._CHECKED.clear()

    def restore() -> None:
        guard._CHECKED.clear()
        guard._CHECKED.update(saved)
    return _fresh_kernels(fast, set_attribute(gemm_loops.GemmEmitter, "bounded", bounded),
                          set_attribute(checked, "and_square_bounded", square_upper_only),
                          set_attribute(checked, "add_squares", squares_upper_only),
                          set_attribute(guard, "_bounded", upper_only), restore)


def replay_key_ignores_views(fast: ModuleType) -> Undo:
    """The replay key leaves out the view a realized input is read through: a graph reading a leaf
    flipped (or permuted to the same shape) replays the kernels recorded for the straight read."""
    walk = _module(fast, "engine.replay")._Walk
    original = walk.entries

    def entries(self: Any) -> Any:
        found = original(self)
        if found is None:
            return None
        keyed, light = found
        stripped = [(static, tuple(ref[:2] + ref[3:] if ref[0] == "l" else ref for ref in refs))
                    if isinstance(refs, tuple) else (static, refs) for static, refs in keyed]
        return stripped, light
    return _fresh_kernels(fast, set_attribute(walk, "entries", entries))


def vector_max_drops_nan(fast: ModuleType) -> Undo:
    """Float vector MAX is `a > b ? a : b` lane by lane: a NaN in the first operand is dropped (the
    scalar MAX and the constant folder still propagate it)."""
    vectors = _module(fast, "renderer.c_vectors").VectorC
    ops = _module(fast, "ops")
    original = vectors.float_alu

    def float_alu(self: Any, op: Any, dtype: Any, a: list[str]) -> str:
        if op is not ops.BinaryOps.MAX:
            return original(self, op, dtype, a)  # type: ignore[no-any-return]
        return self.select(self.mask_of(dtype, f"({a[0]} > {a[1]})"), a[0], a[1], dtype)  # type: ignore[no-any-return]
    return _fresh_kernels(fast, set_attribute(vectors, "float_alu", float_alu))


def vector_polynomial_coefficient(fast: ModuleType) -> Undo:
    """EXP2/LOG2/SIN on vectors evaluate their polynomial with the linear coefficient 2^-12 too large
    (a mistyped constant in a vector-only table); scalar lanes are right."""
    transcendental = _module(fast, "codegen.transcendental")

    def wrong(original: Callable[[Any, tuple[float, ...]], Any]) -> Callable[[Any, tuple[float, ...]], Any]:
        def poly(x: Any, coefs: tuple[float, ...]) -> Any:
            if x.dtype.count > 1 and len(coefs) > 1:
                coefs = (coefs[0], coefs[1] * (1 + 2.0 ** -12), *coefs[2:])
            return original(x, coefs)
        return poly
    plain, fused = transcendental._poly, transcendental._poly_fused
    return _fresh_kernels(fast, combine(set_attribute(transcendental, "_poly", wrong(plain)),
                                        set_attribute(transcendental, "_poly_fused", wrong(fused))))
