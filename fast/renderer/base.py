"""The renderer interface: a `LinearProgram` in, device source text out, capabilities as data.

`Renderer.options` is exactly the `RendererOptions` that `fast.codegen.lower(ast, options)` takes, so
lowering adapts to a backend by reading data (vector support, how far to upcast/unroll), never by
testing a device name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # codegen imports this module for RendererOptions; keep the import one-way at runtime
    from fast.codegen.ir import LinearProgram


@dataclass(frozen=True)
class RendererOptions:
    """What a backend can do and how far lowering may unroll for it.

    - `supports_vectors`: the renderer accepts vector dtypes (`dt.vec(n)`) in LOAD/STORE/ALU. The C
      renderer says False; upcast axes are then emitted as unrolled scalar code.
    - `max_upcast`: lanes an output axis may be upcast (unrolled) by; 1 disables upcasting.
    - `max_unroll`: a reduce axis at most this long is fully unrolled; 1 disables unrolling.
    - `max_unrolled_bodies`: cap on the number of copies of the kernel body (upcast x unroll).
    - `supports_threads`: the runtime can split the outermost GLOBAL loop across threads (not yet).
    """

    supports_vectors: bool = False
    max_upcast: int = 4
    max_unroll: int = 8
    max_unrolled_bodies: int = 32
    supports_threads: bool = False


class Renderer(ABC):
    """Turns a lowered kernel into source text for one backend. Stateless apart from `options`."""

    options: RendererOptions = RendererOptions()

    @abstractmethod
    def render(self, program: LinearProgram) -> str:
        """Source text defining one function named `program.name` whose parameters are the buffers
        (in `program.buffers` order) followed by the int64 symbolic variables (`program.var_names`)."""
