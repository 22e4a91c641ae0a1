"""What `DUMP_IR` and `DEBUG` >= 3 print between the stages of a kernel's pipeline: the stage names,
and an AST as text (engine/realize.py's `compile_item` prints the IR and the source, which their own
stages format).

Invariant: `dump_stages` only reads `config.get()`; an unknown stage name is a ValueError naming it.
"""
from __future__ import annotations

import functools

from fast import config
from fast.dtype import DType
from fast.ops import BufferOps, LazyOp

DUMP_STAGES = ("schedule", "ast", "ir", "source")


def dump_stages() -> frozenset[str]:
    """The stages named by `config.get().dump_ir`; ValueError for an unknown name."""
    return _stages_named(config.get().dump_ir)


@functools.lru_cache(maxsize=16)
def _stages_named(dump_ir: str) -> frozenset[str]:
    names = frozenset(name.strip() for name in dump_ir.split(",") if name.strip())
    unknown = sorted(names - set(DUMP_STAGES))
    if unknown:
        raise ValueError(f"DUMP_IR: unknown stage(s) {unknown}; known: {', '.join(DUMP_STAGES)}")
    return names


def format_ast(ast: LazyOp) -> str:
    """One line per AST node, sources first, shared nodes printed once (`%N` names a node)."""
    nodes = ast.walk()
    position = {id(node): index for index, node in enumerate(nodes)}
    lines = []
    for index, node in enumerate(nodes):
        arg = node.arg
        if node.op in (BufferOps.LOAD, BufferOps.STORE, BufferOps.CONST):
            head = f"data{arg.idx}" if node.op is not BufferOps.CONST else f"{arg.val!r}"
            views = " + ".join(f"{v.shape}:{v.strides}@{v.offset}" + (f" mask {v.mask}" if v.mask else "")
                               for v in arg.st.views)
            arg = f"{head} {arg.dtype.name} {views}"
        elif isinstance(arg, DType):
            arg = arg.name
        srcs = " ".join(f"%{position[id(src)]}" for src in node.src)
        lines.append(" ".join(part for part in (f"%{index} = {node.op.name}", "" if arg is None else str(arg), srcs)
                              if part))
    return "\n".join(lines)
