"""renderer/c_x86.py: under GCC the C renderer calls GCC's `__builtin_ia32_*` functions instead of
including <immintrin.h>; the intrinsic path (clang, or any compiler without FAST_GCC_X86) must give
the same bits. Each helper (FMA, min, max, sqrt, streamed store) of each vector size the CPU has is
compiled both ways with the CLANG runtime's compiler and flags, run through ctypes on values with
NaN, infinities, signed zeros and subnormals, and compared bit for bit."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fast.dtype import DType, dtypes
from fast.renderer import c_x86
from fast.renderer.c_vectors import VectorC
from fast.runtime import cpu
from fast.runtime.clang import compile_flags, compiler_path, is_gcc

OPTIONS = cpu.renderer_options()


def _register_bytes() -> int:
    """The widest vector register the renderer may use on this CPU (bytes)."""
    return OPTIONS.lanes(dtypes.float32) * 4


def _source(dtype: DType) -> str:
    """A C file: the helpers for `dtype` vectors and one exported wrapper per operation, each
    reading its operands from pointers and storing the result."""
    chunks: dict[str, str] = {}

    def need(name: str, text: str) -> str:
        chunks.setdefault(name, text)
        return name
    vectors, register = VectorC(need), _register_bytes()
    scalar = "float" if dtype.scalar() == dtypes.float32 else "double"
    memory = vectors.memory_ctype(dtype)
    load = [f"*(const {memory}*)x{i}" for i in range(3)]
    bodies = {
        "fma": vectors.fma(dtype, load, register),
        "min": vectors.min_max("min", dtype, load[:2], register),
        "max": vectors.min_max("max", dtype, load[:2], register),
        "sqrt": vectors.sqrt(dtype, load[:1]),
    }
    stream = vectors.stream(dtype, "out", load[0], register)
    functions = [f"void w_{name}(const {scalar}* x0, const {scalar}* x1, const {scalar}* x2, {scalar}* out) "
                 f"{{ *({memory}*)out = {body}; }}\n" for name, body in bodies.items() if body is not None]
    if stream is not None:
        functions.append(f"void w_stream(const {scalar}* x0, const {scalar}* x1, const {scalar}* x2, "
                         f"{scalar}* out) {{ {stream} }}\n")
    return "#include <stdint.h>\n#include <math.h>\n" + "".join(chunks.values()) + "".join(functions)


def _build(source: str, folder: Path, name: str) -> ctypes.CDLL:
    path = folder / f"{name}.c"
    path.write_text(source)
    library = folder / f"{name}.so"
    compiler = compiler_path()
    subprocess.run([compiler, *compile_flags(compiler), "-o", str(library), str(path), "-lm"], check=True,
                   capture_output=True)
    return ctypes.CDLL(str(library))


def _operands(dtype: type, lanes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dtype).tiny / 4, -1e-30, 3.0], dtype=dtype)
    values = []
    for _ in range(3):
        v = (rng.standard_normal(lanes) * 10).astype(dtype)
        v[rng.integers(0, lanes, lanes // 2)] = rng.choice(specials, lanes // 2)
        values.append(np.ascontiguousarray(v))
    return values


@pytest.mark.skipif(not cpu.c_flags(), reason="no x86 SIMD level detected on this CPU (the helpers are x86 only)")
@pytest.mark.parametrize("scalar", [dtypes.float32, dtypes.float64])
def test_builtins_and_intrinsics_give_the_same_bits(tmp_path: Path, scalar: DType) -> None:
    numpy_type = np.float32 if scalar == dtypes.float32 else np.float64
    for size in (16, 32, 64):
        if size > _register_bytes():
            continue
        lanes = size // scalar.itemsize
        source = _source(scalar.vec(lanes))
        assert c_x86.PRELUDE in source
        builtin = _build(source, tmp_path, f"builtin{size}")
        intrinsic = _build(source.replace(c_x86.PRELUDE, "#include <immintrin.h>\n"), tmp_path, f"intrinsic{size}")
        for name in ("fma", "min", "max", "sqrt", "stream"):
            for seed in range(4):
                inputs = _operands(numpy_type, lanes, seed)
                outputs = []
                for library in (builtin, intrinsic):
                    out = np.zeros(lanes + 16, dtype=numpy_type)
                    aligned = out[(-out.ctypes.data % 64) // scalar.itemsize:][:lanes]
                    getattr(library, f"w_{name}")(*(ctypes.c_void_p(v.ctypes.data) for v in inputs),
                                                  ctypes.c_void_p(aligned.ctypes.data))
                    outputs.append(aligned.view(np.uint32 if scalar.itemsize == 4 else np.uint64).copy())
                np.testing.assert_array_equal(outputs[0], outputs[1], err_msg=f"{name} on {size}-byte vectors")
        if scalar == dtypes.float32:  # one rounding: exact in float64, then rounded once (finite lanes)
            a, b, c = _operands(numpy_type, lanes, 9)
            out = np.zeros(lanes, dtype=numpy_type)
            builtin.w_fma(*(ctypes.c_void_p(v.ctypes.data) for v in (a, b, c)), ctypes.c_void_p(out.ctypes.data))
            finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
            exact = a[finite].astype(np.float64) * b[finite] + c[finite]
            np.testing.assert_array_equal(out[finite], exact.astype(numpy_type))


@pytest.mark.skipif(not cpu.c_flags() or not is_gcc(compiler_path()), reason="the builtins are GCC's; this compiler "
                    "takes the intrinsic path")
def test_gcc_reads_no_intrinsics_header() -> None:
    source = _source(dtypes.float32.vec(8))
    compiler = compiler_path()
    preprocessed = subprocess.run([compiler, *compile_flags(compiler), "-E", "-x", "c", "-"], input=source,
                                  capture_output=True, text=True, check=True).stdout
    assert "__builtin_ia32_vfmaddps256" in preprocessed and "immintrin.h" not in preprocessed
