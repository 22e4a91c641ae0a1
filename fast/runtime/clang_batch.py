"""Many CLANG kernels built with a few compiler runs: one C file holding several kernels, whose
library is stored in the disk cache as the library of each of their sources.

Starting the compiler and reading its headers dominates the build of a small kernel (GCC reads
<immintrin.h> in about 0.3 s; a 20-line elementwise kernel compiles in a few milliseconds more), so
`fast.debug.compare`, which runs a hundred unfused single-op kernels, builds them together.

`combine(kernels)`: every kernel's source is its prelude (includes, typedefs, `static inline`
helpers: top-level chunks) followed by its kernel function `void NAME(...)`; the combined file holds
each distinct prelude chunk once, in the order first seen, then every kernel function unchanged. A
library exports one symbol per name, so `batches` puts kernels of the same name in different files
(first fit, files of about the total length over the number of workers at most, the kernels with the most
#include lines first, so those with a costly header share few files). `build(compiler,
kernels, workers)` compiles each file and stores its library for every source in it
(`Compiler.store`): a kernel then loads that library and finds its function by name, as with its own.
The compiler, flags and function text are those of a lone build; nothing else differs.

A file that does not compile (a helper of one kernel clashing with another's, say), or whose library
does not load (a symbol one kernel uses is missing), is built again kernel by kernel with
`compile_cached`; a kernel that does not compile alone is left to its item, which raises as before.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from fast.runtime.base import Compiler
from fast.runtime.clang import load_library


@dataclass(frozen=True)
class Kernel:
    """One kernel to build: its function name and full C source."""

    name: str
    source: str


@dataclass
class Batch:
    """Kernels that share one C file (distinct names)."""

    kernels: list[Kernel] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def split(kernel: Kernel) -> tuple[list[str], str]:
    """(prelude chunks, kernel function) of a source; a chunk is a top-level line, the lines of a
    definition up to its closing brace, or a preprocessor conditional up to its #endif."""
    head = f"void {kernel.name}("
    at = kernel.source.rfind("\n" + head)
    start = at + 1 if at >= 0 else (0 if kernel.source.startswith(head) else -1)
    if start < 0:
        raise ValueError(f"clang_batch: no kernel function {kernel.name!r} in its source")
    chunks, current, depth = [], "", 0
    for line in kernel.source[:start].splitlines(keepends=True):
        current += line
        directive = line.lstrip().removeprefix("#").lstrip() if line.lstrip().startswith("#") else ""
        depth += directive.startswith("if") - directive.startswith("endif")
        if depth <= 0 and current.count("{") == current.count("}"):
            chunks.append(current)
            current, depth = "", 0
    if current:
        chunks.append(current)
    return chunks, kernel.source[start:]


def combine(kernels: Sequence[Kernel]) -> str:
    """One C file holding `kernels` (distinct names): each distinct prelude chunk once, then every
    kernel function."""
    prelude: dict[str, None] = {}
    functions = []
    for kernel in kernels:
        chunks, function = split(kernel)
        prelude.update(dict.fromkeys(chunks))
        functions.append(function if function.endswith("\n") else function + "\n")
    return "".join(prelude) + "".join(functions)


def batches(kernels: Sequence[Kernel], parts: int = 1) -> list[Batch]:
    """`kernels` (distinct sources) in files of distinct names, each about 1/`parts` of the total
    length at most (one kernel may exceed it): the kernels with the most #include lines first (so those
    with a costly header share few files), then the longest, each to the first file it fits."""
    found: list[Batch] = []
    sizes: list[int] = []
    lengths = [len(kernel.source) for kernel in kernels] or [0]
    cap = sum(lengths) / max(parts, 1) + max(lengths) / 2
    for kernel in sorted(kernels, key=lambda k: (-k.source.count("#include"), -len(k.source))):
        index = next((i for i, batch in enumerate(found) if kernel.name not in batch.names
                      and sizes[i] + len(kernel.source) <= cap), None)
        if index is None:
            found.append(Batch())
            sizes.append(0)
            index = len(found) - 1
        found[index].kernels.append(kernel)
        found[index].names.add(kernel.name)
        sizes[index] += len(kernel.source)
    return found


def build_batch(compiler: Compiler, batch: Batch) -> None:
    """Compile one file and store its library for each source; one by one when the file fails."""
    if len(batch.kernels) > 1:
        try:
            library = compiler.compile(combine(batch.kernels))
            load_library(library)  # an unresolved symbol of one kernel must not fail the others
        except (RuntimeError, OSError, ValueError):
            pass
        else:
            for kernel in batch.kernels:
                compiler.store(kernel.source, library)
            return
    for kernel in batch.kernels:
        try:
            compiler.compile_cached(kernel.source)
        except Exception:  # noqa: BLE001 - left to the item, which raises it in schedule order
            continue


def build(compiler: Compiler, kernels: Sequence[Kernel], workers: int) -> int:
    """Build the libraries of `kernels` not yet in the disk cache, files on up to `workers` threads;
    returns how many compiler runs (files) were started."""
    unique = {kernel.source: kernel for kernel in kernels if not compiler.is_cached(kernel.source)}
    files = batches(list(unique.values()), max(workers, 1))
    if not files:
        return 0
    if workers < 2 or len(files) == 1:
        for batch in files:
            build_batch(compiler, batch)
        return len(files)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fast-batch") as pool:
        list(pool.map(lambda batch: build_batch(compiler, batch), files))
    return len(files)
