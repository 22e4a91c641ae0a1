"""GPU loops in the C renderer: the loops `grid_map` (renderer/grid.py) spreads over threads, written
with a GPU dialect's thread and block indices (`CDialect.thread`, `threads`, `block`, `blocks`,
`barrier`, `shared`). Everything else is renderer/c.py's `_Kernel`, unchanged.

- A group of perfectly nested GLOBAL loops is one grid-stride loop over the product of their trip
  counts (`flat<N>` from `block * threads + thread`, step `blocks * threads`, all int64), each loop's
  counter recovered by division and remainder; a group of one loop is the loop itself, grid-strided.
- A kernel without any: its body opens with a return for every thread but thread 0 of block 0.
- A block reduction (`BlockReduce`): the output group, if any, is strided by blocks (every thread
  of a block runs the same iterations, so the barriers inside are reached by all of them). At the
  first accumulator a `shared` array of `LANES` partials per accumulator is declared and a loop
  over this thread's lanes opens; the accumulators start there, the flattened reduce loops walk
  the lane's iterations (`lane, lane + LANES, ...`), and at their end each lane's value goes to its
  partial. After a barrier the partials are combined in the fixed tree (the accumulator's own
  update op, rendered as any ALU), each accumulator is read back from partial 0, a barrier lets
  every thread read it before the partials are reused, and the rest of the region (its STOREs)
  runs on thread 0 only.
"""
from __future__ import annotations

from fast.codegen.ir import Instr, IROps, LinearProgram, LoopKind
from fast.dtype import DType
from fast.renderer.c import CDialect, _Kernel, check_renderable, render_const
from fast.renderer.grid import GridMap


class GridKernel(_Kernel):
    """`_Kernel` with the loops of `grid` spread over a GPU's threads (module docstring)."""

    def __init__(self, program: LinearProgram, dialect: CDialect, grid: GridMap, threads: int) -> None:
        super().__init__(program, 0, dialect, threads)
        self.grid, self.heads, self.folded = grid, grid.heads, grid.folded
        self.reduce = grid.block_reduce
        self.lane = f"lane{self.reduce.accs[0]}" if self.reduce is not None else ""

    def prologue(self) -> list[str]:
        d = self.dialect
        if self.grid.single:
            return [f"if ({d.block} != 0 || {d.thread} != 0) return;"]
        if self.reduce is not None and not self.grid.groups:
            return [f"if ({d.block} != 0) return;"]
        return []

    def loop(self, number: int, instr: Instr, a: list[str]) -> str | None:
        d = self.dialect
        if number in self.folded:
            self.names[number] = ("gidx" if instr.arg is LoopKind.GLOBAL else "ridx") + str(number)
            return None
        if self.reduce is not None and number == self.reduce.loops[0]:
            return self.strided(self.reduce.loops, self.lane, str(self.reduce.lanes), "ridx")
        group = self.heads.get(number)
        if group is None:
            return super().loop(number, instr, a)
        if self.reduce is not None:
            return self.strided(group, d.block, d.blocks, "gidx")
        return self.strided(group, f"({d.block} * {d.threads} + {d.thread})", f"({d.blocks} * {d.threads})", "gidx")

    def strided(self, group: tuple[int, ...], first: str, step: str, prefix: str) -> str:
        """One loop over the flattened iterations of `group` (loops starting at 0, grid.py), from
        `first` in steps of `step`, declaring every loop's counter."""
        ends = [self.hoisted(self.program.instrs[loop].srcs[1]) for loop in group]
        name = f"{prefix}{group[0]}"
        self.names.update({loop: f"{prefix}{loop}" for loop in group})
        if len(group) == 1:
            return f"for (int64_t {name} = {first}; {name} < {ends[0]}; {name} += {step}) {{"
        flat = f"flat{group[0]}"
        lines = [f"for (int64_t {flat} = {first}; {flat} < {' * '.join(ends)}; {flat} += {step}) {{"]
        for position, loop in enumerate(group):
            inner = ends[position + 1:]
            value = f"({flat} / ({' * '.join(inner)}))" if inner else flat
            value = f"({value} % {ends[position]})" if position > 0 else value
            lines.append(f"const int64_t {prefix}{loop} = {value};")
        return "\n".join(lines)

    def hoisted(self, number: int) -> str:
        """The C expression of a loop bound used before its definition's turn comes (grid.py: a
        CONST, a DEFINE_VAR, or a value defined before the loop)."""
        if number in self.names:
            return self.names[number]
        instr = self.program.instrs[number]
        if instr.op is IROps.CONST:
            return render_const(instr.arg, instr.dtype.scalar())  # type: ignore[union-attr]
        return f"var{self.program.var_names.index(instr.arg)}"

    def before(self, number: int) -> list[str]:
        reduce, d = self.reduce, self.dialect
        if reduce is None:
            return []
        if number == reduce.accs[0]:
            shared = [f"{d.shared} {self.ctype(self.acc_dtype(acc))} part{acc}[{reduce.lanes}];" for acc in reduce.accs]
            return [*shared, f"for (int64_t {self.lane} = {d.thread}; {self.lane} < {reduce.lanes}; "
                             f"{self.lane} += {d.threads}) {{"]
        return ["}"] if number == reduce.close else []

    def acc_dtype(self, acc: int) -> DType:
        dtype = self.program.instrs[acc].dtype
        assert dtype is not None  # noqa: S101 - a DEFINE_ACC always has a dtype (ir.verify)
        return dtype

    def end_loop(self, loop: int) -> str | None:
        reduce, d = self.reduce, self.dialect
        if reduce is None or loop != reduce.loops[0]:
            return "}"
        half, i = f"half{reduce.accs[0]}", f"i{reduce.accs[0]}"
        combine = " ".join(f"part{acc}[{i}] = {self.combined(acc, update, i, half)};"
                           for acc, update in zip(reduce.accs, reduce.updates, strict=True))
        lines = ["}", *[f"part{acc}[{self.lane}] = acc{acc};" for acc in reduce.accs], "}", d.barrier,
                 f"for (int64_t {half} = {reduce.lanes // 2}; {half} > 0; {half} /= 2) {{",
                 f"for (int64_t {i} = {d.thread}; {i} < {half}; {i} += {d.threads}) {{ {combine} }}",
                 d.barrier, "}"]
        lines += [f"{self.ctype(self.acc_dtype(acc))} acc{acc} = part{acc}[0];" for acc in reduce.accs]
        return "\n".join([*lines, d.barrier, f"if ({d.thread} == 0) {{"])

    def combined(self, acc: int, update: int, i: str, half: str) -> str:
        """Partials `i` and `i + half` of `acc`, combined by its update's op (the ALU's own rules)."""
        dtype = self.acc_dtype(acc)
        instr = self.program.instrs[update]
        return self.alu(Instr(IROps.ALU, dtype, instr.srcs, instr.arg), [dtype, dtype],
                        [f"part{acc}[{i}]", f"part{acc}[{i} + {half}]"])


def render_grid(program: LinearProgram, dialect: CDialect, grid: GridMap, threads: int) -> str:
    """`program` in GPU `dialect` with the loops of `grid` spread over threads; `threads` is the
    block size the kernel head promises."""
    check_renderable(program, dialect)
    return GridKernel(program, dialect, grid, threads).source()
