"""Helpers for the value tests: everything goes through an implementation's public API."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

DEV = "CLANG"
INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
ALL = ["bool", *INTS, *FLOATS]


def disk(tmp_path: Path, name: str = "disk") -> str:
    """A DISK device backed by a file of this test's own temporary directory (parallel-safe)."""
    return f"DISK:{tmp_path / name}"


def dt(impl: ModuleType, name: str) -> Any:
    """The DType called ``name``."""
    return getattr(impl.dtypes, name)


def op(impl: ModuleType, name: str) -> Any:
    """The op called ``name`` from whichever enum holds it (NEG, ADD, WHERE, SUM, ...)."""
    for enum in (impl.UnaryOps, impl.BinaryOps, impl.TernaryOps):
        if name in enum.__members__:
            return enum[name]
    raise KeyError(name)


def buf(impl: ModuleType, values: Any, name: str, device: str = DEV) -> Any:
    """A realized buffer of dtype ``name`` holding ``values`` (bfloat16: float32 values cast)."""
    if name == "bfloat16":
        with np.errstate(over="ignore"):
            return impl.from_numpy(np.asarray(values, dtype=np.float32), device).cast(impl.dtypes.bfloat16)
    with np.errstate(over="ignore"):  # e.g. 1e30 as float16 is inf, on purpose
        return impl.from_numpy(np.asarray(values, dtype=np.dtype(name)), device)


def bits(impl: ModuleType, patterns: Any, name: str = "bfloat16") -> Any:
    """A 16-bit float buffer from raw uint16 bit patterns."""
    return impl.from_numpy(np.asarray(patterns, dtype=np.uint16), DEV).cast(dt(impl, name), bitcast=True)


def to_bits(impl: ModuleType, b: Any) -> np.ndarray:
    """The stored bits of a buffer as unsigned integers of its itemsize."""
    return impl.to_numpy(b.cast(dt(impl, f"uint{8 * b.dtype.itemsize}"), bitcast=True))


def run(impl: ModuleType, name: str, *srcs: Any) -> np.ndarray:
    """to_numpy of elementwise op ``name`` applied to ``srcs``."""
    return impl.to_numpy(srcs[0].e(op(impl, name), *srcs[1:]))


def int_range(name: str) -> tuple[int, int]:
    """(min, max) of an integer dtype, from numpy (independent of the implementations)."""
    info = np.iinfo(np.dtype(name))
    return int(info.min), int(info.max)


def wrap(v: int, name: str) -> int:
    """Python-int oracle for two's complement wrapping into dtype ``name``."""
    lo, hi = int_range(name)
    return (v - lo) % (hi - lo + 1) + lo


def edges(name: str) -> list[int]:
    """Edge values of an integer dtype."""
    lo, hi = int_range(name)
    return sorted({lo, lo + 1, -1 if lo else 0, 0, 1, 2, 7, hi - 1, hi})


def same_float(a: Any, b: Any) -> bool:
    """Exact float equality where NaN == NaN (and -0.0 == 0.0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))
