"""Lowered and rendered kernels kept on disk, so that the first call of a process with a warm cache
lowers, renders and compiles nothing (SPEC §6): `compile_item` asks `load` before lowering and
`save`s what it lowered.

Key: sha256 of everything lowering and rendering read, each in a canonical text form:
- `code_digest()`: the source of the modules that lower and render (fast/codegen, fast/renderer,
  fast/shape, fast/ops.py, fast/dtype.py), so any change to them is a new key;
- the device's renderer class and the `RendererOptions` lowering got (frozensets sorted; FMA off
  for the unfused variant), the lowering settings (`lowering_settings`: NOOPT, PARALLEL_MIN_WORK)
  and whether constants are parameters;
- the AST's structure and constant bits (`kernel_keys`: every node's op, arg and sources; views,
  dtypes, bound-free Variables and constants by bit pattern).
Value: a pickle of (LinearProgram, source). Files are written atomically next to the compiled
libraries (`FAST_CACHE_DIR`, runtime/base.py), so parallel processes and tests are safe; a file
that cannot be read or unpickled is treated as missing. `DISABLE_COMPILER_CACHE=1` turns the store
off with the library cache.

In-process memo: what this process loaded or saved is kept (`MEMO`: the most recent entries, at
most `MEMO_SIZE` of them and `MEMO_BYTES` of source text), so a kernel asked for twice
(engine/prebuild.py asks before the item runs) is read and unpickled once. Programs are frozen
values, so sharing one object is safe. The memo is only consulted where the disk store would be
(not while suspended or with the cache disabled), per cache folder, and a key fixes what its file
holds, so the memo never answers differently from the file.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fast import config
from fast.codegen.const_args import kernel_keys
from fast.codegen.ir import LinearProgram
from fast.ops import LazyOp
from fast.runtime.base import atomic_write

_CODE_PARTS = ("codegen", "renderer", "shape", "ops.py", "dtype.py")
NAMESPACE = "programs"
_SUSPENDED = [0]  # > 0: `suspend` is in effect
MEMO_SIZE, MEMO_BYTES = 256, 32 << 20
MEMO: OrderedDict[tuple[str, str], tuple[LinearProgram, str]] = OrderedDict()  # (cache folder, key) -> value
_MEMO_SOURCE_BYTES = [0]  # the length of MEMO's sources together
_MEMO_LOCK = threading.Lock()


def suspend() -> Callable[[], None]:
    """Stop reading and writing the store until the returned callable is called: code patched in
    memory (conformance's planted bugs) lowers differently from its files, which the key follows."""
    _SUSPENDED[0] += 1
    done = [False]

    def resume() -> None:
        if not done[0]:
            done[0] = True
            _SUSPENDED[0] -= 1
    return resume


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the source files of the modules that lower and render kernels."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for part in _CODE_PARTS:
        path = root / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value: Any) -> str:
    """A text form equal across processes for equal values (sets sorted; hash seeds vary)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (f"{field.name}={_canonical(getattr(value, field.name))}" for field in dataclasses.fields(value))
        return f"{type(value).__name__}({', '.join(fields)})"
    if isinstance(value, (frozenset, set)):
        return "{" + ", ".join(sorted(_canonical(item) for item in value)) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_canonical(item) for item in value) + ")"
    return repr(value)


@functools.lru_cache(maxsize=64)
def _options_text(options: Any) -> str:
    """`_canonical(options)`, once per (hashable, frozen) RendererOptions value: a few thousand
    nodes of text that every kernel's key would otherwise rebuild."""
    return _canonical(options)


def program_key(ast: LazyOp, renderer: str, options: Any, settings: tuple[Any, ...]) -> str:
    """The store's key of one kernel (module docstring): `renderer` names the renderer's class,
    `options` are the RendererOptions lowering got, `settings` the rest (lowering settings, constant
    parameters or not)."""
    structure, bits = kernel_keys(ast)
    text = "\0".join((code_digest(), renderer, _options_text(options), repr(settings), repr(structure.nodes),
                      repr(bits)))
    return hashlib.sha256(text.encode()).hexdigest()


def _path(key: str) -> str:
    return os.path.join(config.get().cache_dir, NAMESPACE, key[:2], key + ".pkl")


def _remember(memo_key: tuple[str, str], value: tuple[LinearProgram, str]) -> None:
    """Keep `value` in MEMO, dropping the oldest entries beyond MEMO_SIZE or MEMO_BYTES."""
    with _MEMO_LOCK:
        old = MEMO.pop(memo_key, None)
        _MEMO_SOURCE_BYTES[0] += len(value[1]) - (len(old[1]) if old is not None else 0)
        MEMO[memo_key] = value
        while MEMO and (len(MEMO) > MEMO_SIZE or _MEMO_SOURCE_BYTES[0] > MEMO_BYTES):
            _MEMO_SOURCE_BYTES[0] -= len(MEMO.popitem(last=False)[1][1])


def clear_memo() -> None:
    """Forget what this process read or wrote (as a new process would start)."""
    with _MEMO_LOCK:
        MEMO.clear()
        _MEMO_SOURCE_BYTES[0] = 0


def load(key: str) -> tuple[LinearProgram, str] | None:
    """The stored (program, source) of `key`, or None."""
    settings = config.get()
    if settings.disable_compile_cache or _SUSPENDED[0]:
        return None
    memo_key = (settings.cache_dir, key)
    with _MEMO_LOCK:
        found = MEMO.get(memo_key)
    if found is not None:
        return found
    try:
        with open(_path(key), "rb") as handle:
            program, source = pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError):
        return None
    if not (isinstance(program, LinearProgram) and isinstance(source, str)):
        return None
    _remember(memo_key, (program, source))
    return program, source


def save(key: str, program: LinearProgram, source: str) -> None:
    """Store (program, source) under `key` (atomically; a failure to write only costs a later miss)."""
    settings = config.get()
    if settings.disable_compile_cache or _SUSPENDED[0]:
        return
    _remember((settings.cache_dir, key), (program, source))
    try:
        atomic_write(_path(key), pickle.dumps((program, source), protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
        pass
