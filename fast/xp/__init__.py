"""fast.xp: the Python Array API standard (2023.12) over lazy buffers.

`from fast import xp` gives the namespace over `fast`: arrays are lazy buffers, evaluated by fusion
when a value is needed. The front end (fast/xp/_*.py) is written once against the public LazyBuffer
API of docs/api.md and knows nothing else of `fast`; `namespace_for(reference)` gives the same
namespace over `reference`'s buffers, so a model written against the standard runs on the
executable specification for debugging. `reference` itself never imports this package (it shares
no code with `fast`). `jit(fn)` captures a function of arrays (fast/xp/_jit.py over `fast.jit`);
repeated sequences of uncaptured calls run as captured plans too (call replay: fast/xp/_tape.py).
Coverage, laziness, promotion and what raises: docs/api.md, section "fast.xp".
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import fast as _fast
from fast import config as _config
from fast.engine.realize import REALIZE_OBSERVERS as _REALIZE_OBSERVERS
from fast.xp import _tape_hooks
from fast.xp._jit import array_jit as _array_jit
from fast.xp._namespace import API_VERSION, namespace_for
from fast.xp._tape import Host as _Host

__array_api_version__ = API_VERSION
namespace_for(_fast, sys.modules[__name__])


def _tape_context() -> object | None:
    """The configuration uncaptured calls are taped under (fast/xp/_tape.py), or None: taping is off
    (FAST_XP_TAPE=0), or output that every realize gives is asked for (DEBUG>=2, DUMP_IR, GRAPH), or
    `fast.debug.trace()` records the graph-building calls as they are made."""
    settings = _config.get()
    if not settings.xp_tape or settings.debug >= 2 or settings.dump_ir or settings.graph:
        return None
    tracing = sys.modules.get("fast.debug.trace")
    return None if tracing is not None and getattr(tracing, "_ACTIVE", (0,))[0] else settings


_tape_hooks.enable(sys.modules[__name__],
                   _Host(jit=_fast.jit, context=_tape_context, stale=lambda lb: lb.stale_alias() is not None,
                         debug=lambda: _config.get().debug),
                   _REALIZE_OBSERVERS, _config.CHANGE_HOOKS)


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Extension: `fn` (Arrays in, an Array or a tuple/list of Arrays out) captured with `fast.jit`: the
    first call per signature traces, later calls replay its kernels on the new arrays (docs/api.md)."""
    return _array_jit(fn, _fast.jit, sys.modules[__name__].asarray)


def reference_namespace() -> object:
    """The same namespace over `reference` (imported on first use)."""
    import reference

    return namespace_for(reference)
