"""Kernels of schedule items: `compile_item` runs the whole pipeline of one kernel AST, and the
per-process caches find a compiled kernel again (fast/engine/realize.py runs them).

Pipeline of one kernel (`compile_item`, the one place that shows it whole):
    ast --lower--> LinearProgram --render--> source --compile_cached--> library --runtime--> Program
Programs are cached per process (`PROGRAMS`, a bounded LRU: engine/programs.py), keyed by device,
the configuration lowering reads (`lowering_settings`) and `ast_key(ast)`: identical graphs over
other buffers give equal ASTs (schedule.py), so running a graph again compiles nothing. An AST
that differs from one already compiled only in the values of its constants (same structure,
codegen/const_args.py) compiles once more, with every constant a kernel parameter, and that
parametrized kernel serves every later value set (`get_kernel`). `lowered` reads and fills the disk
store of lowered and rendered programs (engine/program_store.py).

Invariants: every cache operation holds `_CACHE_LOCK` (lanes of engine/parallel.py look kernels up
concurrently) and no compile runs under it; a cached kernel is reused only under the configuration
it was lowered with; a kernel whose fused multiply-adds could overflow on its inputs runs unfused
(`runnable`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fast import config
from fast.codegen import format_program, lower
from fast.codegen.const_args import kernel_keys
from fast.codegen.ir import LinearProgram
from fast.device import Buffer, Device
from fast.engine import fma_guard, program_store
from fast.engine.dumps import dump_stages, format_ast
from fast.engine.programs import ProgramCache
from fast.engine.schedule import ScheduleItem
from fast.ops import LazyOp

# Called as observer(ast, device, const_params) after `compile_item` compiled a kernel (CI's compile-only
# checks compile the same kernel for CUDA there: tests/conftest.py, conformance/cuda_compile.py).
COMPILE_OBSERVERS: list[Callable[[LazyOp, str, bool], None]] = []


# ---------------------------------------------------------------- the program cache

@dataclass(frozen=True)
class CompiledKernel:
    """A loaded kernel: its lowered program (name, variables, estimates), source and runner."""

    program: LinearProgram
    source: str
    runner: Any  # fast.runtime.base.Program
    unfused: list[CompiledKernel] = field(default_factory=list, compare=False)  # memo of `runnable`


# ("inline", device, settings, structure, bits) -> a kernel with these constants inline;
# ("params", device, settings, structure) -> its parametrized kernel, or None: seen once, not yet compiled.
# `settings` (`lowering_settings()`): the configuration lowering reads, so a kernel compiled under
# another NOOPT or PARALLEL_MIN_WORK (config.override mid-process) is never reused.
PROGRAMS: ProgramCache[tuple[Any, ...], CompiledKernel | None] = ProgramCache()
# (id(ast), device, settings) -> (ast, its PROGRAMS key, get_kernel's answer): replayed schedules hand the same
# AST objects back, so their kernels are found without walking the AST again. The entry holds its
# AST, so the id stays its own, and is used only while PROGRAMS still holds the kernel (an evicted
# kernel is compiled again, as without the memo).
_KernelMemo = tuple[LazyOp, tuple[Any, ...], tuple[CompiledKernel, tuple[int, ...]]]
AST_KERNELS: ProgramCache[tuple[int, str, tuple[bool, int]], _KernelMemo] = ProgramCache()
_CACHE_LOCK = threading.Lock()


def lowering_settings() -> tuple[bool, int]:
    """What lowering reads from the configuration (codegen/opt.py, codegen/lower.py): NOOPT and
    PARALLEL_MIN_WORK. Part of every kernel cache key."""
    settings = config.get()
    return settings.noopt, settings.parallel_min_work


def ast_key(ast: LazyOp) -> tuple[Any, ...]:
    """A hashable key equal exactly for structurally equal ASTs with bit-identical constants (so a
    kernel storing -0.0 is never reused for one storing 0.0), built in linear time: the structure
    (constants replaced by slot numbers) and the constants' bit patterns (codegen/const_args.py)."""
    return kernel_keys(ast)


def compile_item(ast: LazyOp, device: str, const_params: bool = False, fuse: bool = True) -> CompiledKernel:
    """The whole pipeline for one kernel AST on `device`, printing the stages asked for;
    `const_params`: the constants become kernel parameters (see `lower`); `fuse` False: no fused
    multiply-adds even where the renderer has them (codegen/fma.py)."""
    compiled = Device[device]
    if config.get().debug >= 3 or "ast" in dump_stages():
        print(f"--- ast ({device})\n{format_ast(ast)}")
    program, source = lowered(ast, device, const_params, fuse)
    library = compiled.compiler.compile_cached(source)
    launch_dims = compiled.renderer.launch_dims(program)
    for observe in COMPILE_OBSERVERS:
        observe(ast, device, const_params)
    return CompiledKernel(program, source, compiled.runtime(program.name, library, launch_dims))


def lowered(ast: LazyOp, device: str, const_params: bool = False, fuse: bool = True) -> tuple[LinearProgram, str]:
    """(program, source) of a kernel AST on `device`: from the disk store (engine/program_store.py),
    or lowered and rendered (printing the stages asked for) and stored."""
    debug, stages = config.get().debug, dump_stages()
    compiled = Device[device]
    options = compiled.renderer.options if fuse else replace(compiled.renderer.options, fused_multiply_add=False)
    renderer = compiled.renderer
    key = program_store.program_key(ast, type(renderer).__qualname__, options, (lowering_settings(), const_params))
    stored = None if debug >= 3 or {"ir", "source"} & stages else program_store.load(key)
    if stored is None:
        program = lower(ast, options, const_params=const_params)
        if debug >= 3 or "ir" in stages:
            print(f"--- ir ({device})\n{format_program(program)}")
        source = renderer.render(program)
        if debug >= 4 or "source" in stages:
            print(f"--- source ({device})\n{source}")
        program_store.save(key, program, source)
        return program, source
    return stored


def runnable(kernel: CompiledKernel, ast: LazyOp, device: str, buffers: Sequence[Buffer]) -> CompiledKernel:
    """`kernel`, or when its fused multiply-adds could overflow on these buffers' values
    (engine/fma_guard.py), the same kernel lowered without them (compiled once, kept with it)."""
    if not kernel.program.bounded_inputs or fma_guard.within_bounds(kernel.program, buffers):
        return kernel
    if not kernel.unfused:
        kernel.unfused.append(compile_item(ast, device, kernel.program.const_slots > 0, fuse=False))
    return kernel.unfused[0]


def get_kernel(device: str, ast: LazyOp) -> tuple[CompiledKernel, tuple[int, ...]]:
    """The kernel for `ast` on `device` and the constant parameters to pass it (after the shape
    variables; empty for a kernel with its constants inline). The first AST of a structure compiles
    with its constants inline; another value set of that structure compiles the parametrized kernel
    once, which then serves every value set not compiled inline."""
    memo_key = (id(ast), device, lowering_settings())
    with _CACHE_LOCK:
        memo = AST_KERNELS.get(memo_key)
        if memo is not None and memo[0] is ast and PROGRAMS.get(memo[1]) is memo[2][0]:
            return memo[2]
    structure, bits = kernel_keys(ast)
    found = kernel_for(device, ast, structure, bits, own_values=True)
    key = ("params", device, memo_key[2], structure) if found[1] else ("inline", device, memo_key[2], structure, bits)
    with _CACHE_LOCK:
        AST_KERNELS[memo_key] = (ast, key, found)
    return found


def uses_parameters(device: str, structure: Any, bits: tuple[int, ...]) -> bool:
    """Whether `get_kernel` would run the parametrized kernel for an AST of `structure` with
    constants `bits` (not compiled inline yet, and the structure was seen with other values)."""
    with _CACHE_LOCK:
        settings = lowering_settings()
        return bool(bits) and ("inline", device, settings, structure, bits) not in PROGRAMS \
            and ("params", device, settings, structure) in PROGRAMS


def kernel_for(device: str, ast: LazyOp, structure: Any, bits: tuple[int, ...],
               own_values: bool) -> tuple[CompiledKernel, tuple[int, ...]]:
    """`get_kernel` for an AST of `structure` whose constant slots hold `bits`; with `own_values`
    False the AST's own constants may differ from `bits` (a replayed schedule), so it is only ever
    compiled parametrized. Cache operations hold `_CACHE_LOCK` (lanes of engine/parallel.py look
    kernels up concurrently); compiles run outside it."""
    settings = lowering_settings()
    inline_key, params_key = ("inline", device, settings, structure, bits), ("params", device, settings, structure)
    with _CACHE_LOCK:
        kernel = PROGRAMS.get(inline_key)
        if kernel is not None:
            return kernel, ()
        parametrize = bool(bits) and (params_key in PROGRAMS or not own_values)
        kernel = PROGRAMS.get(params_key) if parametrize else None
    if kernel is not None:
        return kernel, bits
    kernel = compile_item(ast, device, const_params=parametrize)
    with _CACHE_LOCK:
        if parametrize:
            PROGRAMS[params_key] = kernel
            return kernel, bits
        PROGRAMS[inline_key] = kernel
        if bits:  # the structure is seen: inserted (or touched) last, so it outlives the kernel in a tiny cache
            PROGRAMS[params_key] = PROGRAMS.get(params_key)
    return kernel, ()


def _pending_build(item: ScheduleItem) -> tuple[Any, str] | None:
    """For engine/prebuild.py: the (compiler, source) that running `item` would compile first (its
    structure is new to this process, so it compiles inline), or None."""
    device, settings = item.bufs[0].device, config.get()
    compiler = Device[device].compiler
    if not compiler.parallel_builds or settings.disable_compile_cache or settings.debug >= 3 or dump_stages():
        return None  # (dumps print each stage once, in schedule order)
    structure, bits = kernel_keys(item.ast)
    lowering = lowering_settings()
    keys = (("inline", device, lowering, structure, bits), ("params", device, lowering, structure))
    with _CACHE_LOCK:
        if any(key in PROGRAMS for key in keys):
            return None
    return compiler, lowered(item.ast, device)[1]
