"""Lowering kernel ASTs to the linear IR: `lower(ast, options) -> LinearProgram` (see lower.py),
the IR itself with its printer and verifier (ir.py), and the optimization plan (opt.py)."""
from fast.codegen.ir import IndexOps, Instr, IROps, LinearProgram, LoopKind, format_program
from fast.codegen.ir_verify import verify
from fast.codegen.lower import lower

__all__ = ["IROps", "IndexOps", "Instr", "LinearProgram", "LoopKind", "format_program", "lower", "verify"]
