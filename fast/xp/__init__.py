"""fast.xp: the Python Array API standard (2023.12) over lazy buffers.

`from fast import xp` gives the namespace over `fast`: arrays are lazy buffers, evaluated by fusion
when a value is needed. The front end (fast/xp/_*.py) is written once against the public LazyBuffer
API of docs/api.md and knows nothing else of `fast`; `namespace_for(reference)` gives the same
namespace over `reference`'s buffers, so a model written against the standard runs on the
executable specification for debugging. `reference` itself never imports this package (it shares
no code with `fast`). `jit(fn)` captures a function of arrays (fast/xp/_jit.py over `fast.jit`).
Coverage, laziness, promotion and what raises: docs/api.md, section "fast.xp".
"""
from __future__ import annotations

import os as _os
import sys
from collections.abc import Callable
from typing import Any

import fast as _fast
from fast.xp import _tape_hooks as _tape
from fast.xp._jit import array_jit as _array_jit
from fast.xp._namespace import API_VERSION, namespace_for

__array_api_version__ = API_VERSION
namespace_for(_fast, sys.modules[__name__])
if _os.environ.get("FAST_XP_TAPE", "1") != "0":  # call replay of uncaptured code (fast/xp/_tape.py)
    _tape.enable(sys.modules[__name__], _fast.jit)


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Extension: `fn` (Arrays in, an Array or a tuple/list of Arrays out) captured with `fast.jit`: the
    first call per signature traces, later calls replay its kernels on the new arrays (docs/api.md)."""
    return _array_jit(fn, _fast.jit, sys.modules[__name__].asarray)


def reference_namespace() -> object:
    """The same namespace over `reference` (imported on first use)."""
    import reference

    return namespace_for(reference)
