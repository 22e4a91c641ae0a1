"""Which lowering a matmul-shaped kernel gets (codegen/lower.py asks `plan`): the AMX tiles where they
apply (gemm_tiles.py `applies`; MATRIX_TILES=0 turns them off through the renderer's options), else
the FMA micro-kernel (gemm_loops.py), else none (a kernel that is not matmul-shaped: opt.py plans it).

A plan is a function that lowers the kernel into a lowering context and returns (scratch arrays,
chunks per thread). Without batch axes every chunk of a threaded launch packs each column block of
B it touches again (all of B when there is one block), so such a kernel asks for one chunk per
thread (`LinearProgram.chunks_per_thread`; 0: the launcher's default).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fast import config
from fast.codegen import gemm_tiles
from fast.codegen.analyze import KernelInfo
from fast.codegen.gemm import GemmShape, choose_tiles, match
from fast.codegen.gemm_loops import GemmEmitter
from fast.codegen.ir import BufferInfo
from fast.renderer.base import RendererOptions

Lowering = Callable[[Any], tuple[tuple[BufferInfo, ...], int]]


def plan(info: KernelInfo, options: RendererOptions) -> Lowering | None:
    """The kernel's GEMM lowering (module docstring), or None when it is not matmul-shaped."""
    shape = match(info, options)
    if shape is None:
        return None
    noopt = config.get().noopt
    if gemm_tiles.applies(shape, options) and not noopt:
        tile_sizes = gemm_tiles.choose_tiles(shape, options)
        return _lowering(lambda ctx: gemm_tiles.TileEmitter(ctx, shape, tile_sizes), shape)
    tiles = choose_tiles(shape, options)
    if tiles is None:
        return None
    fused = options.fused_multiply_add and not noopt
    return _lowering(lambda ctx: GemmEmitter(ctx, shape, tiles, fused), shape)


def _lowering(make: Callable[[Any], GemmEmitter], shape: GemmShape) -> Lowering:
    """Run the emitter `make` builds on the lowering context; one chunk per thread unless batched."""
    chunks = 0 if shape.batch else 1

    def lower_into(ctx: Any) -> tuple[tuple[BufferInfo, ...], int]:
        emitter = make(ctx)
        emitter.run()
        return tuple(emitter.arrays), chunks
    return lower_into
