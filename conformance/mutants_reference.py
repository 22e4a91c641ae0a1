"""The same planted bugs for a *copy* of `reference` (see `reference_copy`), so the harness can be
tested on its own: the expected side stays the real `reference`, the candidate is the patched copy.
"""
from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from conformance.mutants_fast import Undo, combine, set_attribute


def reference_copy(directory: Path, name: str = "refcopy") -> ModuleType:
    """Copy the `reference` package into `directory` as package `name` and import it."""
    source = Path(importlib.import_module("reference").__file__ or "").parent
    target = directory / name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.glob("*.py"):
        text = re.sub(r"\breference\b(?=[.\s])", name, path.read_text())
        path.write_text(text)
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    return importlib.import_module(name)


def _sub(pkg: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{pkg.__name__}.{name}")


def _wrap_elementwise(pkg: ModuleType, rewrite: Any) -> Undo:
    ops = _sub(pkg, "ops")
    original = ops.elementwise

    def elementwise(op: Any, dt: Any, srcs: list[Any]) -> Any:
        out = rewrite(ops, op, dt, srcs)
        return original(op, dt, srcs) if out is None else out
    return set_attribute(ops, "elementwise", elementwise)


def max_drops_nan(pkg: ModuleType) -> Undo:
    dtype = _sub(pkg, "dtype")
    ops = _sub(pkg, "ops")

    def rewrite(ops: Any, op: Any, dt: Any, srcs: list[Any]) -> Any:
        if op is not ops.BinaryOps.MAX or dt.kind != "f":
            return None
        a, b = (dtype.to_compute(s, dt) for s in srcs)
        return dtype.from_float(np.fmax(a, b), dt)
    original_reduce = ops.reduce

    def reduce(op: Any, dt: Any, arr: Any, axis: Any) -> Any:
        if op is ops.ReduceOps.MAX and dt.kind == "f":
            values = dtype.to_compute(arr, dt)
            arr = dtype.from_float(np.where(np.isnan(values), -np.inf, values).astype(values.dtype), dt)
        return original_reduce(op, dt, arr, axis)
    return combine(_wrap_elementwise(pkg, rewrite), set_attribute(ops, "reduce", reduce))


def sub_swapped(pkg: ModuleType) -> Undo:
    ops = _sub(pkg, "ops")
    original = ops.elementwise

    def elementwise(op: Any, dt: Any, srcs: list[Any]) -> Any:
        return original(op, dt, srcs[::-1] if op is ops.BinaryOps.SUB else srcs)
    return set_attribute(ops, "elementwise", elementwise)


def pad_mask_off_by_one(pkg: ModuleType) -> Undo:
    realize = _sub(pkg, "realize")
    original = realize.apply_movement

    def apply_movement(arr: Any, name: str, arg: Any) -> Any:
        out = original(arr, name, arg)
        if name != "pad":
            return out
        out = np.array(out)
        for axis, ((before, after), size) in enumerate(zip(arg, arr.shape, strict=True)):
            if (before, after) != (0, 0) and size > 0:
                index = [slice(None)] * out.ndim
                index[axis] = before + size - 1
                out[tuple(index)] = 0
        return out
    return set_attribute(realize, "apply_movement", apply_movement)


def mod_divisor_sign(pkg: ModuleType) -> Undo:
    def rewrite(ops: Any, op: Any, dt: Any, srcs: list[Any]) -> Any:
        if op is not ops.BinaryOps.MOD or dt.kind != "i":
            return None
        a, b = srcs
        with np.errstate(all="ignore"):
            r = ops._divmod_int(a, b, dt)[1]
            fix = (r != 0) & ((r < 0) != (b < 0)) & (b != 0)
            return np.where(fix, (r.astype(np.int64) + b.astype(np.int64)).astype(dt.storage), r)
    return _wrap_elementwise(pkg, rewrite)


def allreduce_skips_last_part(pkg: ModuleType) -> Undo:
    """Over the sharded axis on more than 2 devices, the last shard's part is left out."""
    mlb = pkg.MultiLazyBuffer
    original = mlb.__dict__["r"]

    def r(self: Any, op: Any, axis: Any) -> Any:
        if self.axis is not None and self.axis in tuple(axis) and all(self.real) and len(self.lbs) > 2:
            lbs = [*self.lbs[:-1], self.lbs[-1].const(0)]
            return original(mlb(lbs, self.axis, self.real), op, axis)
        return original(self, op, axis)
    return set_attribute(mlb, "r", r)


def uneven_shard_floor(pkg: ModuleType) -> Undo:
    mlb = pkg.MultiLazyBuffer
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
    return set_attribute(mlb, "from_sharded", staticmethod(from_sharded))


def fold_masked_const(pkg: ModuleType) -> Undo:
    """pad of a CONST gives the constant everywhere (as if the mask had been folded away)."""
    lb_class = pkg.LazyBuffer
    original = lb_class.__dict__["pad"]

    def pad(self: Any, arg: Any) -> Any:
        out = original(self, arg)
        if self.op is pkg.LoadOps.CONST:
            return lb_class.loadop(pkg.LoadOps.CONST, out.shape, self.dtype, self.device, arg=self.arg)
        return out
    return set_attribute(lb_class, "pad", pad)


def variables_at_max(pkg: ModuleType) -> Undo:
    """A bound Variable's value reads as its maximum (in every shape and argument)."""
    variable = _sub(pkg, "shape").Variable
    original = variable.__dict__["val"]
    return set_attribute(variable, "val", property(lambda self: (original.fget(self), self.max)[1]))
