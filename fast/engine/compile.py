"""Ahead-of-time compilation: the kernels realizing some buffers would run, compiled, nothing run.

`compile(*buffers)` schedules the buffers as `realize` would (engine/schedule.py: pure, nothing is
allocated), then sends every kernel item through the first stages of `realize.compile_item`'s
pipeline: lower -> render -> compile (the device's compiler, with its on-disk cache). It stops
there: nothing is loaded, allocated or run, so it works for devices whose runtime is absent (CUDA
graphs on a machine without a GPU: the NVRTC compiler alone is needed) and a later `realize`
behaves exactly as if `compile` had not been called (it finds the compiled code in the disk cache).

Which variant of a kernel is compiled follows `realize.get_kernel`: constants inline, unless the
process already compiled the same structure with other constant values, in which case `realize`
would use the parametrized kernel (codegen/const_args.py), and so does `compile`.

Copies, CUSTOM calls and other host items are not kernels and have no entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fast.codegen import lower
from fast.codegen.const_args import kernel_keys
from fast.codegen.ir import LinearProgram
from fast.device import Device
from fast.engine.realize import uses_parameters
from fast.engine.schedule import schedule
from fast.ops import KernelOps, LazyOp
from fast.runtime.base import Compiler


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel. `binary`: what the device's compiler produced (a shared object for
    CLANG; for LLVM the object file behind a 26-byte header, `runtime.llvm.LIBRARY_MAGIC` and a
    source digest; a cubin, or NUL-terminated PTX, for CUDA); `global_size` / `local_size`: the
    launch grid and block of a GPU kernel (None on CPUs, whose kernels loop over their outputs)."""

    name: str
    device: str
    source: str
    binary: bytes
    global_size: tuple[int, ...] | None
    local_size: tuple[int, ...] | None


def compile(*buffers: Any) -> list[Kernel]:
    """The kernels `realize(*buffers)` would run, in order, compiled; nothing is allocated or run.
    Arguments as for `realize` (LazyBuffers and MultiLazyBuffers)."""
    kernels: list[Kernel] = []
    for item in schedule(*buffers):
        if item.ast.op is KernelOps.SINK:
            device = item.bufs[0].device
            structure, bits = kernel_keys(item.ast)
            kernels.append(compile_kernel(item.ast, device, uses_parameters(device, structure, bits)))
    return kernels


def compile_kernel(ast: LazyOp, device: str, const_params: bool = False, compiler: Compiler | None = None) -> Kernel:
    """One kernel AST lowered and rendered for `device` and compiled by its compiler, or by
    `compiler` when given (an NVRTC compiler for another GPU architecture, say). Loads nothing.
    `const_params`: the constants become kernel parameters (codegen/const_args.py)."""
    compiled = Device[device]
    program, source = render_kernel(ast, device, const_params)
    binary = (compiler or compiled.compiler).compile_cached(source)
    dims = compiled.renderer.launch_dims(program)
    return Kernel(program.name, device, source, binary,
                  dims[0] if dims is not None else None, dims[1] if dims is not None else None)


def render_kernel(ast: LazyOp, device: str, const_params: bool = False) -> tuple[LinearProgram, str]:
    """The lowered program and source text of one kernel AST for `device` (nothing compiled)."""
    renderer = Device[device].renderer
    program = lower(ast, renderer.options, const_params=const_params)
    return program, renderer.render(program)
