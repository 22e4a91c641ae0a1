"""x86 AMX matrix tiles in LLVM IR (`IROps.TILE`, codegen/ir.py `TileOps`): the intrinsics that
name tiles by number (`llvm.x86.tileloadd64` and the rest), and the 64-byte configuration
(palette 1, every tile 16 rows x 64 bytes) as a private constant. The target machine is the host's
CPU and features (runtime/llvm.py), which include `amx-tile` and `amx-bf16` wherever lowering
is allowed to make tiles (`RendererOptions.matrix_tiles`)."""
from __future__ import annotations

from fast.codegen.ir import TILE_REGISTERS, TILE_ROW_BYTES, TILE_ROWS, Instr, LinearProgram, TileOps

_DECLARATIONS = (
    "declare void @llvm.x86.ldtilecfg(ptr)\n"
    "declare void @llvm.x86.tilerelease()\n"
    "declare void @llvm.x86.tilezero(i8)\n"
    "declare void @llvm.x86.tileloadd64(i8, ptr, i64)\n"
    "declare void @llvm.x86.tilestored64(i8, ptr, i64)\n"
    "declare void @llvm.x86.tdpbf16ps(i8, i8, i8)\n"
)


def tile_module_text() -> str:
    """The declarations and the configuration constant a module with tiles needs."""
    header = [1] + [0] * 15
    columns = [byte for _ in range(TILE_REGISTERS) for byte in (TILE_ROW_BYTES & 0xFF, TILE_ROW_BYTES >> 8)]
    columns += [0] * (32 - len(columns))
    rows = [TILE_ROWS] * TILE_REGISTERS + [0] * (16 - TILE_REGISTERS)
    data = "".join(f"\\{byte:02X}" for byte in header + columns + rows)
    return _DECLARATIONS + f'@fast_tile_config = private unnamed_addr constant [64 x i8] c"{data}", align 64\n'


def tile_call(program: LinearProgram, instr: Instr, pointer: str | None) -> str:
    """The call of one TILE instruction (`pointer`: the address of its LOAD/STORE index)."""
    form, *numbers = instr.arg
    if form is TileOps.CONFIG:
        return "call void @llvm.x86.ldtilecfg(ptr @fast_tile_config)"
    if form is TileOps.RELEASE:
        return "call void @llvm.x86.tilerelease()"
    if form is TileOps.ZERO:
        return f"call void @llvm.x86.tilezero(i8 {numbers[0]})"
    if form is TileOps.DOT:
        return f"call void @llvm.x86.tdpbf16ps(i8 {numbers[0]}, i8 {numbers[1]}, i8 {numbers[2]})"
    tile, buffer, stride = numbers
    row_bytes = stride * program.memory(buffer).dtype.itemsize
    name = "tileloadd64" if form is TileOps.LOAD else "tilestored64"
    return f"call void @llvm.x86.{name}(i8 {tile}, ptr {pointer}, i64 {row_bytes})"
