"""LLVM IR renderer: a `LinearProgram` as one LLVM function with no undefined behaviour and no poison.

Output: `define void @<name>(ptr %data0, ..., i64 %var0, ...)`, the same parameter order and value
semantics as the C renderer (fast/renderer/c.py), so LLVM and CLANG agree bit for bit on every op x
dtype (transcendentals too: lowering expands them into ALU code). Pointers carry no `noalias` (an
in-place kernel may read its own output) and accesses are `align 1` (views may sit at any byte offset).

How docs/semantics.md is kept:
- values: `bool` is `i1` (stored as an `i8` 0/1; loads normalise with `!= 0`); `float16`/`bfloat16`
  are `i16` bit patterns; each op decodes them to float, computes in float32 and encodes with
  round-to-nearest-even in integer code (`@f32_to_f16`, `@f32_to_bf16`: the C helpers' algorithms;
  these and the other helper functions are in fast/renderer/llvm_helpers.py).
- integers: `add/sub/mul` carry no `nsw/nuw`, so they wrap. `sdiv/srem/udiv/urem` get a divisor of 1
  substituted (by `select`, before the division) for 0 and -1, then the documented result is
  selected: `x/0 = 0`, `x%0 = x`, `x/-1 = 0-x` (so `MIN/-1 = MIN`), `x%-1 = 0`.
- float -> int: the double value is replaced by 0.0 unless trunc(x) fits the target (ordered
  compares, so NaN fails), then `fptosi/fptoui` (never poison); out of range / NaN / inf give 0,
  like the C helpers `f2i_*`.
- float MAX: NaN if either operand is NaN (`fcmp uno`), else `a > b ? a : b` (never `maxnum`);
  CMPLT/CMPEQ are `fcmp olt/oeq` (false on NaN); no fast-math flags anywhere; MULACC is `fmul`
  then `fadd` (never `fma`/`fmuladd`, and without `contract` flags LLVM does not fuse them). The
  IR's own `FusedOps.FMA` (codegen/fma.py: float sums of products) is the `llvm.fma` intrinsic.
- SQRT is the `llvm.sqrt` intrinsic, on vectors too (the correctly rounded instruction); EXP2/LOG2/SIN, which lowering
  expands into ALU code for every float dtype, map to the `llvm.exp2/log2/sin` intrinsics only in
  IR that still holds them (hand-built IR in tests).
- index arithmetic is i64; masked loads and stores branch around the access (the address is only
  computed and dereferenced on the valid path); GEPs are plain (never `inbounds`).
- accumulators are `alloca`s in the entry block (promoted to registers by the optimiser).
- vectors (fast/renderer/llvm_vectors.py): `<N x T>` values with the same semantics lane by lane;
  a vector LOAD/STORE is one `align 1` access of N consecutive elements (masked: all or none).
- the values (emission, ALU ops, casts, index arithmetic) are fast/renderer/llvm_alu.py's
  `AluEmitter`; this module adds memory accesses, loops and the function around them.
- loops: an innermost loop recomputing many loop-invariant values carries `llvm.loop.vectorize.enable
  false` (fast/renderer/llvm_loops.py: LLVM 22's loop vectorizer takes exponential time on them).
- matrix tiles (`IROps.TILE`): the x86 AMX intrinsics, fast/renderer/llvm_tiles.py.
- streamed outputs (codegen/streaming.py): a vector STORE of 16, 32 or 64 bytes (at most the
  register width) tests its address; aligned, it is a `!nontemporal` store with that alignment,
  else the plain `align 1` store. Such a kernel ends with `llvm.x86.sse.sfence`.
"""
from __future__ import annotations

import re

from fast.codegen.ir import Instr, IROps, LinearProgram
from fast.dtype import DType, dtypes
from fast.renderer.base import Renderer, RendererOptions, cpu_options
from fast.renderer.llvm_alu import HALVES, AluEmitter, render_const
from fast.renderer.llvm_helpers import VALUE_TYPES
from fast.renderer.llvm_loops import unvectorized_loops
from fast.renderer.llvm_tiles import tile_call, tile_module_text
from fast.renderer.llvm_vectors import llvm_type, zero

__all__ = ["HALVES", "LLVMIRRenderer", "render_const"]


class _Kernel(AluEmitter):
    """Renders one program: `AluEmitter`'s values plus memory accesses, loops and the function."""

    # -- memory
    def address(self, buffer: int, index: str, lanes: int) -> tuple[str, str]:
        """(memory type, pointer token) of `lanes` elements from `index` of buffer `buffer` (plain GEP of
        the element type, no inbounds; a bool element is an i8, `lanes > 1` makes a vector type)."""
        dtype = self.program.memory(buffer).dtype
        element = "i8" if dtype == dtypes.bool else VALUE_TYPES[dtype]
        memory = element if lanes == 1 else f"<{lanes} x {element}>"
        return memory, self.value(f"getelementptr {element}, ptr %data{buffer}, i64 {index}")

    def load(self, number: int, instr: Instr, a: list[str]) -> str:
        """buffer[index] (a vector dtype: that many consecutive elements); with a validity operand the
        access happens only on the valid branch, else the value is zero."""
        dtype: DType = instr.dtype  # type: ignore[assignment]
        if len(a) == 2:
            before, taken, done = self.block, f"M{number}.load", f"M{number}.done"
            self.emit(f"br i1 {a[1]}, label %{taken}, label %{done}")
            self.label(taken)
        memory, pointer = self.address(instr.arg, a[0], dtype.count)
        element = self.value(f"load {memory}, ptr {pointer}, align 1")
        if dtype.scalar() == dtypes.bool:
            element = self.value(f"icmp ne {memory} {element}, {zero(dtype)}")
        if len(a) == 1:
            return element
        self.emit(f"br label %{done}")
        self.label(done)
        return self.value(f"phi {llvm_type(dtype)} [ {element}, %{taken} ], [ {render_const(0, dtype)}, %{before} ]")

    def prefetch(self, number: int, instr: Instr, a: list[str]) -> None:
        """A PREFETCH: `llvm.prefetch` (a read, kept in every cache level, data), only on the valid branch."""
        if len(a) == 2:
            taken, done = f"P{number}.prefetch", f"P{number}.done"
            self.emit(f"br i1 {a[1]}, label %{taken}, label %{done}")
            self.label(taken)
        _, pointer = self.address(instr.arg, a[0], 1)
        self.emit(f"call void @llvm.prefetch.p0(ptr {pointer}, i32 0, i32 3, i32 1)")
        self.prefetches += 1
        if len(a) == 2:
            self.emit(f"br label %{done}")
            self.label(done)

    def store(self, number: int, instr: Instr, a: list[str]) -> None:
        if len(a) == 3:
            taken, done = f"S{number}.store", f"S{number}.done"
            self.emit(f"br i1 {a[2]}, label %{taken}, label %{done}")
            self.label(taken)
        dtype: DType = self.program.instrs[instr.srcs[1]].dtype  # type: ignore[assignment]
        memory, pointer = self.address(instr.arg, a[0], dtype.count)
        value = a[1]
        if dtype.scalar() == dtypes.bool:
            value = self.value(f"zext {llvm_type(dtype)} {value} to {memory}")
        size = dtype.scalar().itemsize * dtype.count
        if instr.arg in self.program.streamed and dtype.count > 1 and dtype.scalar() != dtypes.bool \
                and size in (16, 32, 64) and size <= self.register_bytes:
            self.streamed_store(number, memory, value, pointer, size)
        else:
            self.emit(f"store {memory} {value}, ptr {pointer}, align 1")
        if len(a) == 3:
            self.emit(f"br label %{done}")
            self.label(done)

    def streamed_store(self, number: int, memory: str, value: str, pointer: str, size: int) -> None:
        """Non-temporal when `pointer` is aligned to `size` bytes, else a plain store."""
        address = self.value(f"ptrtoint ptr {pointer} to i64")
        offset = self.value(f"and i64 {address}, {size - 1}")
        aligned = self.value(f"icmp eq i64 {offset}, 0")
        stream, plain, after = f"S{number}.stream", f"S{number}.plain", f"S{number}.after"
        self.emit(f"br i1 {aligned}, label %{stream}, label %{plain}")
        self.label(stream)
        self.emit(f"store {memory} {value}, ptr {pointer}, align {size}, !nontemporal !0")
        self.emit(f"br label %{after}")
        self.label(plain)
        self.emit(f"store {memory} {value}, ptr {pointer}, align 1")
        self.emit(f"br label %{after}")
        self.label(after)
        self.streams += 1

    # -- control flow and instructions
    def loop(self, number: int, a: list[str]) -> None:
        counter, head = f"%loop{number}", f"L{number}.head"
        before = self.block
        self.emit(f"br label %{head}")
        self.label(head)
        self.emit(f"{counter} = phi i64 [ {a[0]}, %{before} ], [ {counter}.next, %L{number}.latch ]")
        more = self.value(f"icmp slt i64 {counter}, {a[1]}")
        self.emit(f"br i1 {more}, label %L{number}.body, label %L{number}.exit")
        self.label(f"L{number}.body")
        self.names[number] = counter

    def end_loop(self, loop: int) -> None:
        self.emit(f"br label %L{loop}.latch")
        self.label(f"L{loop}.latch")
        self.emit(f"%loop{loop}.next = add i64 %loop{loop}, 1")
        if loop in self.scalar_loops:  # llvm_loops.py: kept from LLVM's loop vectorizer
            self.emit(f"br label %L{loop}.head, !llvm.loop !{2 + sorted(self.scalar_loops).index(loop)}")
        else:
            self.emit(f"br label %L{loop}.head")
        self.label(f"L{loop}.exit")

    def statement(self, number: int, instr: Instr) -> None:
        """Emit one instruction, recording the token of its value in `names`."""
        op, dtype = instr.op, instr.dtype
        if op is IROps.CONST:
            self.names[number] = render_const(instr.arg, dtype)  # type: ignore[arg-type]
        elif op is IROps.DEFINE_VAR:
            self.names[number] = f"%var{self.program.var_names.index(instr.arg)}"
        elif op is IROps.DEFINE_ACC:
            self.names[number] = f"%acc{number}"
            self.allocas.append(f"  %acc{number} = alloca {llvm_type(dtype)}")  # type: ignore[arg-type]
            self.emit(f"store {llvm_type(dtype)} {render_const(instr.arg, dtype)}, ptr %acc{number}")  # type: ignore
        elif op is IROps.ENDLOOP:
            self.end_loop(instr.srcs[0])
        elif op is IROps.ASSIGN:
            acc_type = llvm_type(self.program.instrs[instr.srcs[0]].dtype)  # type: ignore[arg-type]
            self.emit(f"store {acc_type} {self.operand(instr.srcs[1])}, ptr {self.names[instr.srcs[0]]}")
        else:
            self.computed(number, instr, [self.operand(src) for src in instr.srcs])

    def computed(self, number: int, instr: Instr, a: list[str]) -> None:
        """Emit an instruction whose operands `a` are ready (accumulators already read)."""
        op = instr.op
        types: list[DType] = [self.program.instrs[src].dtype for src in instr.srcs]  # type: ignore[misc]
        if op is IROps.LOOP:
            self.loop(number, a)
        elif op is IROps.STORE:
            self.store(number, instr, a)
        elif op is IROps.PREFETCH:
            self.prefetch(number, instr, a)
        elif op is IROps.TILE:
            pointer = self.address(instr.arg[2], a[0], 1)[1] if a else None
            self.emit(tile_call(self.program, instr, pointer))
            self.tiles = True
        elif op is IROps.LOAD:
            self.names[number] = self.load(number, instr, a)
        elif op is IROps.INDEX:
            divisor_is_const = self.program.instrs[instr.srcs[-1]].op is IROps.CONST
            self.names[number] = self.index(instr.arg, divisor_is_const, a)
        elif op is IROps.VECTORIZE:
            self.names[number] = self.vectors.vectorize(instr.dtype, a)  # type: ignore[arg-type]
        elif op is IROps.GEP:
            self.names[number] = self.vectors.gep(types[0], a[0], instr.arg)
        elif op is IROps.SHUFFLE:
            self.names[number] = self.vectors.shuffle(types[0], a, instr.arg)
        else:
            self.names[number] = self.alu(instr, types, a)

    def source(self) -> str:
        self.scalar_loops = unvectorized_loops(self.program)
        for scratch in self.program.scratch:  # private to this call (codegen/gemm.py)
            element = "i8" if scratch.dtype == dtypes.bool else VALUE_TYPES[scratch.dtype]
            self.allocas.append(f"  %data{scratch.idx} = alloca {element}, i64 {scratch.size}, align 64")
        for number, instr in enumerate(self.program.instrs):
            self.statement(number, instr)
        params = [f"ptr %data{b.idx}" for b in self.program.buffers]
        params += [f"i64 %var{i}" for i in range(len(self.program.var_names))]
        comments = "".join(f"; var{i} = {n}\n" for i, n in enumerate(self.program.var_names)
                           if re.fullmatch(r"[A-Za-z0-9_]+", n))
        fence = ["  call void @llvm.x86.sse.sfence()"] if self.streams else []  # visible to every thread
        body = "\n".join(["entry:", *self.allocas, *self.lines, *fence, "  ret void"])
        streaming = "declare void @llvm.x86.sse.sfence()\n!0 = !{i32 1}\n" if self.streams else ""
        if self.prefetches:
            streaming += "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)\n"
        if self.tiles:
            streaming += tile_module_text()
        if self.scalar_loops:
            streaming += "!1 = !{!\"llvm.loop.vectorize.enable\", i1 false}\n"
            streaming += "".join(f"!{2 + k} = distinct !{{!{2 + k}, !1}}\n" for k in range(len(self.scalar_loops)))
        return ("".join(self.helpers.values()) + comments
                + f"define void @{self.program.name}({', '.join(params)}) #1 {{\n{body}\n}}\n"
                + "attributes #0 = { alwaysinline nounwind }\nattributes #1 = { nounwind }\n" + streaming)


class LLVMIRRenderer(Renderer):
    """LLVM IR text for the LLVM runtime (llvmlite). `options` say what lowering may give it: by default
    scalar code only (upcast axes become unrolled scalar code, no thread parameters); with
    `cpu_options(vector_bytes)` the vector instructions of fast/codegen/ir.py (fast/renderer/llvm_vectors.py)."""

    def __init__(self, options: RendererOptions | None = None) -> None:
        self.options = options if options is not None else cpu_options(0, threads=False)

    def render(self, program: LinearProgram) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", program.name):
            raise ValueError(f"LLVM renderer: kernel name {program.name!r} is not an identifier")
        return _Kernel(program, self.options.vector_bytes).source()
