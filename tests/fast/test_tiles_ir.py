"""IROps.TILE on both CPU renderers, against numpy: one tile product (16 x 32 bfloat16 by a VNNI
tile of 32 x 16) added to a loaded accumulator, and the verifier's refusals. The products run only
where the host has AMX tiles (cpu.matrix_tiles); the rendering checks run everywhere."""
from __future__ import annotations

import numpy as np
import pytest
from kernel_values import private_cache, run_program

from fast import dtypes
from fast.codegen.builder import IRBuilder
from fast.codegen.ir import INT64, BufferInfo, Instr, IRError, IROps, LinearProgram, TileOps
from fast.codegen.ir_verify import verify
from fast.renderer.c import C_DIALECT, render_c
from fast.renderer.llvmir import LLVMIRRenderer
from fast.runtime import clang, cpu, llvm
from fast.runtime.base import Compiled

NEEDS_TILES = pytest.mark.skipif(not cpu.matrix_tiles(),
                                 reason="no AMX tiles with bfloat16 on this host (or MATRIX_TILES=0)")


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even bfloat16 bit patterns of float32 values (finite)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def tile_program(offset: int = 0) -> LinearProgram:
    """c (16 x 16 float32) := c + a (16 x 32 bf16, rows `32 + offset` apart) . b (VNNI 16 x 32 bf16)."""
    b = IRBuilder()
    zero = b.const(0, INT64)
    b.tile(TileOps.CONFIG)
    b.tile(TileOps.LOAD, 0, 0, 16, index=zero)
    b.tile(TileOps.LOAD, 4, 1, 32 + offset, index=b.const(offset, INT64))
    b.tile(TileOps.LOAD, 6, 2, 32, index=zero)
    b.tile(TileOps.DOT, 0, 4, 6)
    b.tile(TileOps.STORE, 0, 0, 16, index=zero)
    b.tile(TileOps.RELEASE)
    buffers = (BufferInfo(0, dtypes.float32, True, 256),
               BufferInfo(1, dtypes.uint16, False, 16 * (32 + offset) + offset),
               BufferInfo(2, dtypes.uint16, False, 512))
    return LinearProgram(f"tile_dot_{offset}", tuple(b.instrs), buffers)


@pytest.fixture(params=["CLANG", "LLVM"])
def device(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with private_cache(tmp_path_factory):
        yield (clang if request.param == "CLANG" else llvm).create(request.param)


@NEEDS_TILES
@pytest.mark.parametrize("offset", [0, 3])
def test_a_tile_product_matches_numpy(device: Compiled, offset: int) -> None:
    if not device.renderer.options.matrix_tiles:
        pytest.skip(f"{device.device} has no tiles here (its compiler cannot build them)")
    rng = np.random.default_rng(offset)
    a_values, b_values = rng.uniform(-2, 2, (16, 32)), rng.uniform(-2, 2, (32, 16))
    a_bits, b_bits = _bf16_bits(a_values), _bf16_bits(b_values)
    a_store = np.zeros(16 * (32 + offset) + offset, np.uint16)
    for row in range(16):
        a_store[offset + row * (32 + offset):offset + row * (32 + offset) + 32] = a_bits[row]
    vnni = b_bits.reshape(16, 2, 16).transpose(0, 2, 1).reshape(-1)  # [k // 2][n][k % 2]
    start = rng.uniform(-1, 1, 256).astype(np.float32)
    (out,), _ = run_program(device, tile_program(offset), [a_store, vnni], outputs=[start.copy()])
    want = _from_bits(a_bits).astype(np.float64) @ _from_bits(b_bits).astype(np.float64) + start.reshape(16, 16)
    np.testing.assert_allclose(out.reshape(16, 16), want, rtol=1e-6, atol=1e-5)


def test_both_renderers_write_every_form() -> None:
    program = tile_program(3)
    c_text = render_c(program, C_DIALECT)
    for piece in ("_tile_loadconfig(fast_tile_config)", "_tile_loadd(4, &data1[3LL], 70)", "_tile_dpbf16ps(0, 4, 6)",
                  "_tile_stored(0, &data0[0LL], 64)", "_tile_release()", 'target("amx-tile,amx-bf16")'):
        assert piece in c_text
    llvm_text = LLVMIRRenderer().render(program)
    for piece in ("@llvm.x86.ldtilecfg(ptr @fast_tile_config)", "@llvm.x86.tdpbf16ps(i8 0, i8 4, i8 6)",
                  "@llvm.x86.tileloadd64(i8 4", "i64 70)", "@llvm.x86.tilerelease()"):
        assert piece in llvm_text


@pytest.mark.parametrize("arg,srcs,message", [
    ((TileOps.DOT, 0, 8, 1), (), "tiles"),
    ((TileOps.LOAD, 1, 7, 16), (0,), "buffer"),
    ((TileOps.LOAD, 1, 0, 0), (0,), "stride"),
    ((TileOps.ZERO,), (), "malformed"),
    ((TileOps.STORE, 0, 1, 16), (0,), "not an output"),
    ((TileOps.LOAD, 1, 0, 16), (), "operands"),
])
def test_the_verifier_refuses_bad_tiles(arg: tuple, srcs: tuple, message: str) -> None:
    instrs = (Instr(IROps.CONST, INT64, (), 0), Instr(IROps.TILE, None, srcs, arg))
    buffers = (BufferInfo(0, dtypes.float32, True, 256), BufferInfo(1, dtypes.uint16, False, 512))
    program = LinearProgram("bad", instrs, buffers)
    with pytest.raises(IRError, match=message):
        verify(program)
