"""x86 AMX matrix tiles in C (`IROps.TILE`, codegen/ir.py `TileOps`), through the compiler's
intrinsics (`<immintrin.h>`): a kernel that uses tiles gets the header, a 64-byte tile
configuration (palette 1, every tile 16 rows x 64 bytes) and the `amx-tile,amx-bf16` target on its
function, so the rest of the file keeps the runtime's flags. Only renderers whose options have
`matrix_tiles` see such instructions (the CLANG runtime sets it after compiling a probe)."""
from __future__ import annotations

from fast.codegen.ir import Instr, IROps, LinearProgram, TileOps, tile_config_bytes, tile_fields

#: The function attribute a kernel with tiles gets.
TILE_TARGET = '__attribute__((target("amx-tile,amx-bf16"))) '


def uses_tiles(program: LinearProgram) -> bool:
    """Whether `program` has TILE instructions."""
    return any(instr.op is IROps.TILE for instr in program.instrs)


def tile_prelude() -> str:
    """The header and the configuration array a kernel with tiles needs."""
    values = ", ".join(map(str, tile_config_bytes()))
    return ("#include <immintrin.h>\n"
            f"static const uint8_t fast_tile_config[64] __attribute__((aligned(64))) = {{{values}}};\n")


#: The C statement of each TILE form (codegen/ir.py `tile_fields`; `pointer`: the LOAD/STORE address).
TILE_STATEMENTS = {
    TileOps.CONFIG: "_tile_loadconfig(fast_tile_config);", TileOps.RELEASE: "_tile_release();",
    TileOps.ZERO: "_tile_zero({t});", TileOps.DOT: "_tile_dpbf16ps({c}, {a}, {b});",
    TileOps.LOAD: "_tile_loadd({t}, {pointer}, {row_bytes});",
    TileOps.STORE: "_tile_stored({t}, {pointer}, {row_bytes});",
}


def tile_statement(program: LinearProgram, instr: Instr, a: list[str]) -> str:
    """The C statement of one TILE instruction (`a`: the rendered index, for LOAD and STORE)."""
    fields = tile_fields(program, instr)
    pointer = f"&data{fields['buffer']}[{a[0]}]" if a else ""
    return TILE_STATEMENTS[instr.arg[0]].format(pointer=pointer, **fields)
