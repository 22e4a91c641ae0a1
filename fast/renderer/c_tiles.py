"""x86 AMX matrix tiles in C (`IROps.TILE`, codegen/ir.py `TileOps`), through the compiler's
intrinsics (`<immintrin.h>`): a kernel that uses tiles gets the header, a 64-byte tile
configuration (palette 1, every tile 16 rows x 64 bytes) and the `amx-tile,amx-bf16` target on its
function, so the rest of the file keeps the runtime's flags. Only renderers whose options have
`matrix_tiles` see such instructions (the CLANG runtime sets it after compiling a probe)."""
from __future__ import annotations

from fast.codegen.ir import TILE_REGISTERS, TILE_ROW_BYTES, TILE_ROWS, Instr, IROps, LinearProgram, TileOps

#: The function attribute a kernel with tiles gets.
TILE_TARGET = '__attribute__((target("amx-tile,amx-bf16"))) '


def uses_tiles(program: LinearProgram) -> bool:
    """Whether `program` has TILE instructions."""
    return any(instr.op is IROps.TILE for instr in program.instrs)


def tile_prelude() -> str:
    """The header and the configuration array a kernel with tiles needs."""
    header = [1] + [0] * 15  # palette 1, start row 0, reserved
    columns = [byte for _ in range(TILE_REGISTERS) for byte in (TILE_ROW_BYTES & 0xFF, TILE_ROW_BYTES >> 8)]
    columns += [0] * (32 - len(columns))
    rows = [TILE_ROWS] * TILE_REGISTERS + [0] * (16 - TILE_REGISTERS)
    values = ", ".join(map(str, header + columns + rows))
    return ("#include <immintrin.h>\n"
            f"static const uint8_t fast_tile_config[64] __attribute__((aligned(64))) = {{{values}}};\n")


def tile_statement(program: LinearProgram, instr: Instr, a: list[str]) -> str:
    """The C statement of one TILE instruction (`a`: the rendered index, for LOAD and STORE)."""
    form, *numbers = instr.arg
    if form is TileOps.CONFIG:
        return "_tile_loadconfig(fast_tile_config);"
    if form is TileOps.RELEASE:
        return "_tile_release();"
    if form is TileOps.ZERO:
        return f"_tile_zero({numbers[0]});"
    if form is TileOps.DOT:
        return f"_tile_dpbf16ps({numbers[0]}, {numbers[1]}, {numbers[2]});"
    tile, buffer, stride = numbers
    row_bytes = stride * program.memory(buffer).dtype.itemsize
    name = "_tile_loadd" if form is TileOps.LOAD else "_tile_stored"
    return f"{name}({tile}, &data{buffer}[{a[0]}], {row_bytes});"
