"""x86 SIMD operations in the C renderer's source (renderer/c_vectors.py), without `<immintrin.h>`
under GCC.

Parsing `<immintrin.h>` with the AVX-512 flags costs GCC about 0.25 s of a kernel's compile, more
than compiling most kernels: a MiniLM call compiles six kernels that use an FMA or min/max. The
intrinsics are thin wrappers of GCC's `__builtin_ia32_*` functions, so under GCC the source calls
those directly (the same instructions: tests/fast/test_c_x86.py compares the bits); other compilers
(clang) include the header and call the intrinsics as before. The choice is made by the
preprocessor (`FAST_GCC_X86` defined or not), so the source is the same for every compiler and the renderer never
asks which one will run.
"""
from __future__ import annotations

#: First in a source that uses any of these operations: says whether GCC's builtins are used, and
#: includes the header for other x86 compilers. No line repeats (runtime/clang_batch.py merges the
#: preludes of several kernels line by line).
PRELUDE = ("#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)\n#define FAST_GCC_X86 1\n"
           "#elif defined(__x86_64__)\n#include <immintrin.h>\n#endif\n")

#: The builtin's name stem per intrinsic operation.
_STEMS = {"fmadd": "vfmadd", "min": "min", "max": "max", "sqrt": "sqrt"}
#: `_MM_FROUND_CUR_DIRECTION`: the rounding argument of the AVX-512 builtins (the current mode).
_CURRENT_ROUNDING = "4"


def builtin(operation: str, itemsize: int, size: int, args: list[str]) -> str:
    """GCC's builtin call computing `_mm<size>_<operation>_<ps|pd>(args)` on generic vectors of
    `itemsize`-byte floats, `size` bytes each. The 64-byte ones take a lane mask (all lanes), a
    pass-through vector for lanes the mask leaves out (none: the first operand) and the rounding."""
    name = f"__builtin_ia32_{_STEMS[operation]}{'ps' if itemsize == 4 else 'pd'}{ {16: '', 32: '256', 64: '512'}[size]}"
    if size != 64:
        return f"{name}({', '.join(args)})"
    mask = "(unsigned short)-1" if itemsize == 4 else "(unsigned char)-1"
    passthrough = [] if operation == "fmadd" else [args[0]]
    return f"{name}_mask({', '.join([*args, *passthrough, mask, _CURRENT_ROUNDING])})"


def stream_builtin(size: int, pointer: str, value: str) -> str:
    """GCC's builtin of `_mm<size>_stream_si<bits>`: a non-temporal store of `value` at `pointer`
    (aligned to `size`)."""
    lanes = f"long long __attribute__((vector_size({size})))"
    name = {16: "movntdq", 32: "movntdq256", 64: "movntdq512"}[size]
    return f"__builtin_ia32_{name}(({lanes}*){pointer}, ({lanes}){value});"


def either(gcc: str, intrinsic: str, indent: str = "  ") -> str:
    """A function body: the GCC builtin statement or the intrinsic one, chosen by the preprocessor."""
    return f"\n#if defined(FAST_GCC_X86)\n{indent}{gcc}\n#else\n{indent}{intrinsic}\n#endif\n"
