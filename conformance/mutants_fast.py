"""Planted bugs for `fast`, written against its actual internals. Each returns an undo callable.

Every patch also empties fast's per-process kernel caches (`engine.realize.PROGRAMS` and
`AST_KERNELS`) and its recorded schedules (`engine.replay.TEMPLATES`, which hold kernels too) and
restores them on undo, so no kernel compiled with the bug outlives the patch and none compiled
before it hides it.
A missing patch point raises AttributeError: a renamed internal fails the mutation test loudly.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, MutableMapping
from types import ModuleType
from typing import Any

import numpy as np

Undo = Callable[[], None]


def set_attribute(owner: Any, name: str, value: Any) -> Undo:
    old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    return lambda: setattr(owner, name, old)


def set_item(mapping: MutableMapping[Any, Any], key: Any, value: Any) -> Undo:
    old = mapping[key]
    mapping[key] = value
    return lambda: mapping.__setitem__(key, old)


def combine(*undos: Undo) -> Undo:
    """One undo running the given ones in reverse order."""
    def undo() -> None:
        for step in reversed(undos):
            step()
    return undo


def _module(fast: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{fast.__name__}.{name}")


def _fresh_kernels(fast: ModuleType, *undos: Undo) -> Undo:
    """Undo the patches and swap the kernel cache back to what it held before them. While patched,
    the disk store of lowered kernels is suspended: its keys follow the code's files, not patches."""
    caches = [_module(fast, "engine.realize").PROGRAMS, _module(fast, "engine.realize").AST_KERNELS,
              _module(fast, "engine.replay").TEMPLATES]
    saved = [dict(cache) for cache in caches]
    for cache in caches:
        cache.clear()
    resume = _module(fast, "engine.program_store").suspend()

    def undo() -> None:
        combine(*undos)()
        resume()
        for cache, before in zip(caches, saved, strict=True):
            cache.clear()
            cache.update(before)
    return undo


def max_drops_nan(fast: ModuleType) -> Undo:
    """Float MAX (binary, reduce, folding) returns the other operand when one is NaN (fmax)."""
    c, ops = _module(fast, "renderer.c"), _module(fast, "ops")

    def helpers(ctype: str) -> str:
        return (f"static inline {ctype} max_{ctype}({ctype} a, {ctype} b) "
                "{ return a != a ? b : b != b ? a : a > b ? a : b; }\n")
    return _fresh_kernels(fast, set_attribute(c, "float_max_helper", helpers),
                          set_item(ops._FLOAT_RULES, ops.BinaryOps.MAX, lambda a, b: float(np.fmax(a, b))))


def sub_swapped(fast: ModuleType) -> Undo:
    """SUB computes b - a (in kernels and in the constant folder)."""
    c, ops = _module(fast, "renderer.c"), _module(fast, "ops")
    kernel = c._Kernel
    original = kernel.alu

    def alu(self: Any, instr: Any, src_types: list[Any], a: list[str]) -> str:
        if instr.arg is ops.BinaryOps.SUB:
            a = [a[1], a[0], *a[2:]]
        return original(self, instr, src_types, a)  # type: ignore[no-any-return]
    sub = ops.BinaryOps.SUB
    return _fresh_kernels(fast, set_attribute(kernel, "alu", alu),
                          set_item(ops._FLOAT_RULES, sub, lambda a, b: float(b - a)),
                          set_item(ops._INT_RULES, sub, lambda a, b: b - a))


def short_pad(view_class: Any) -> Callable[[Any, Any], Any]:
    """`view_class.pad` whose mask ends one element early on padded axes (also planted by
    tests/fast/test_debug.py)."""
    original = view_class.pad

    def pad(self: Any, arg: Any) -> Any:
        out = original(self, arg)
        if out is self or out.mask is None:
            return out
        mask = tuple((start, end - 1) if tuple(pair) != (0, 0) and end > start else (start, end)
                     for (start, end), pair in zip(out.mask, arg, strict=True))
        return view_class.create(out.shape, out.strides, out.offset, mask)
    return pad


def pad_mask_off_by_one(fast: ModuleType) -> Undo:
    """View.pad's mask ends one element early on padded axes (the last real element reads as 0)."""
    view_class = _module(fast, "shape.view").View
    return _fresh_kernels(fast, set_attribute(view_class, "pad", short_pad(view_class)))


def mod_divisor_sign(fast: ModuleType) -> Undo:
    """Signed integer MOD takes the divisor's sign (Python's %), in kernels and when folding."""
    c, ops = _module(fast, "renderer.c"), _module(fast, "ops")
    original = c.division_helpers

    def helpers(dtype: Any) -> str:
        text = original(dtype)
        if fast.dtypes.is_unsigned(dtype):
            return text
        ctype, name = c.CTYPES[dtype], dtype.name
        python_mod = (f"static inline {ctype} mod_{name}({ctype} a, {ctype} b) {{ if (b == 0) return a; "
                      f"if (b == -1) return 0; {ctype} r = ({ctype})(a % b); "
                      f"return (r != 0 && ((r < 0) != (b < 0))) ? ({ctype})((uint64_t)r + (uint64_t)b) : r; }}\n")
        return text.split("\n")[0] + "\n" + python_mod

    def fold(a: int, b: int) -> int:
        return a if b == 0 else a % b
    return _fresh_kernels(fast, set_attribute(c, "division_helpers", helpers),
                          set_item(ops._INT_RULES, ops.BinaryOps.MOD, fold))


def replace_everywhere(fast: ModuleType, name: str, original: Any, replacement: Any) -> Undo:
    """Rebind `name` in every loaded module of the package that holds `original` under it (so a
    function moved between modules and re-exported is patched where it is called)."""
    prefix = fast.__name__ + "."
    owners = [m for key, m in list(sys.modules.items())
              if (key == fast.__name__ or key.startswith(prefix)) and getattr(m, name, None) is original]
    if not owners:
        raise AttributeError(f"no module of {fast.__name__} holds {name}")
    return combine(*(set_attribute(m, name, replacement) for m in owners))


def ring_skips_last_chunk(fast: ModuleType) -> Undo:
    """The ring all-reduce forgets its last chunk (those elements come back as zeros)."""
    original = _module(fast, "graph.multi").ring_chunks

    def ring_chunks(numel: int, ndev: int) -> list[tuple[int, int]]:
        chunks = original(numel, ndev)
        return chunks[:-1] if len(chunks) > 1 else chunks
    return _fresh_kernels(fast, replace_everywhere(fast, "ring_chunks", original, ring_chunks))


def uneven_shard_floor(fast: ModuleType) -> Undo:
    """from_sharded with floor-sized shards, the last taking the rest: every boundary shifts."""
    multi = _module(fast, "graph.multi")
    mlb = multi.MultiLazyBuffer
    original = mlb.__dict__["from_sharded"].__func__

    def from_sharded(lb: Any, devices: Any, axis: Any) -> Any:
        names = tuple(devices)
        size = None if axis is None else lb.shape[axis]
        if size is None or size % len(names) == 0 or size < len(names):
            return original(lb, devices, axis)
        step = size // len(names)
        ranges = [(step * i, step * (i + 1)) for i in range(len(names) - 1)] + [(step * (len(names) - 1), size)]
        whole = [(0, dim) for dim in lb.shape]
        shards = []
        for bound, name in zip(ranges, names, strict=True):
            whole[axis] = bound
            shards.append(lb.shrink(tuple(whole)).copy_to_device(name))
        return mlb(shards, axis)
    return _fresh_kernels(fast, set_attribute(mlb, "from_sharded", staticmethod(from_sharded)))


def fold_masked_const(fast: ModuleType) -> Undo:
    """Constant folding treats a padded (masked) constant as a plain constant."""
    lazy = _module(fast, "graph.node")
    return _fresh_kernels(fast, set_attribute(lazy.LazyBuffer, "is_unrealized_unmasked_const",
                                              lambda self: self.is_unrealized_const()))


def variables_at_max(fast: ModuleType) -> Undo:
    """Kernels run every symbolic size at its variable's maximum instead of its bound value."""
    builder = _module(fast, "engine.schedule").KernelBuilder
    original = builder.__dict__["_unbind"]

    def _unbind(self: Any, st: Any) -> Any:
        unbound = original(self, st)
        self.var_vals.update({var: var.max for var in self.var_vals})
        return unbound
    return _fresh_kernels(fast, set_attribute(builder, "_unbind", _unbind))


def bake_bound_variables(fast: ModuleType) -> Undo:
    """The scheduler leaves bound values in kernel ASTs instead of unbinding them: right values, but a
    kernel compiled per binding (only the symbolic programs' reuse check sees it)."""
    schedule, symbolic = _module(fast, "engine.schedule"), _module(fast, "shape.symbolic")
    view_class, tracker = _module(fast, "shape.view").View, _module(fast, "shape.shapetracker").ShapeTracker

    def baked(view: Any, values: dict[Any, Any]) -> Any:
        def put(x: Any) -> Any:
            return symbolic.as_sint(x.substitute(values)) if isinstance(x, symbolic.Node) else x
        mask = None if view.mask is None else tuple((put(start), put(end)) for start, end in view.mask)
        return view_class.create(tuple(map(put, view.shape)), tuple(map(put, view.strides)), put(view.offset), mask)

    original = schedule.KernelBuilder.__dict__["_unbind"]

    def _unbind(self: Any, st: Any) -> Any:
        original(self, st)  # still records the values (a schedule with variables is never replayed)
        simple = st.simplify()
        values = {var: symbolic.NumNode(value) for var, value in simple.var_vals.items()}
        return tracker(tuple(baked(view, values) for view in simple.views))
    return _fresh_kernels(fast, set_attribute(schedule.KernelBuilder, "_unbind", _unbind))
