"""x86 AMX matrix tiles in LLVM IR (`IROps.TILE`, codegen/ir.py `TileOps`): the intrinsics that
name tiles by number (`llvm.x86.tileloadd64` and the rest), and the 64-byte configuration
(palette 1, every tile 16 rows x 64 bytes) as a private constant. The target machine is the host's
CPU and features (runtime/llvm.py), which include `amx-tile` and `amx-bf16` wherever lowering
is allowed to make tiles (`RendererOptions.matrix_tiles`)."""
from __future__ import annotations

from fast.codegen.ir import Instr, LinearProgram, TileOps, tile_config_bytes, tile_fields

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
    data = "".join(f"\\{byte:02X}" for byte in tile_config_bytes())
    return _DECLARATIONS + f'@fast_tile_config = private unnamed_addr constant [64 x i8] c"{data}", align 64\n'


#: The call of each TILE form (codegen/ir.py `tile_fields`; `pointer`: the LOAD/STORE address).
TILE_CALLS = {
    TileOps.CONFIG: "call void @llvm.x86.ldtilecfg(ptr @fast_tile_config)",
    TileOps.RELEASE: "call void @llvm.x86.tilerelease()",
    TileOps.ZERO: "call void @llvm.x86.tilezero(i8 {t})",
    TileOps.DOT: "call void @llvm.x86.tdpbf16ps(i8 {c}, i8 {a}, i8 {b})",
    TileOps.LOAD: "call void @llvm.x86.tileloadd64(i8 {t}, ptr {pointer}, i64 {row_bytes})",
    TileOps.STORE: "call void @llvm.x86.tilestored64(i8 {t}, ptr {pointer}, i64 {row_bytes})",
}


def tile_call(program: LinearProgram, instr: Instr, pointer: str | None) -> str:
    """The call of one TILE instruction (`pointer`: the address of its LOAD/STORE index)."""
    return TILE_CALLS[instr.arg[0]].format(pointer=pointer or "", **tile_fields(program, instr))
