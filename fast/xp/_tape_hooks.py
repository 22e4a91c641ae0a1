"""The hooks of call replay (fast/xp/_tape.py, whose docstring states the rules): the wrapper of
taped namespace functions (`taped`), recording and speculating a call, and the read-backs (of a
recorded result: store the episode; of a Deferred: run the episode's plan, or materialize).

Invariant: a call is deferred only while its key equals the episode's next key; a plan runs only at
a read-back point the episode stored, after the `take` index checks pass.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from fast.xp import _array
from fast.xp._array import Array
from fast.xp._tape import _EPISODES, _JITS, _LOCAL, MAX_EPISODES, MAX_TAPE, Deferred, Episode, Tape, _Nested, _Ref


def enable(module: Any, jit: Callable[[Callable[..., Any]], Any]) -> None:
    """Tape the calls of the namespace `module`, running matched episodes through the capture `jit`."""
    _JITS[id(module.reshape.__self__)] = jit
    _array.READ_HOOK = read_back


def taped(fname: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` (a namespace function) with its top-level calls taped (module docstring)."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_LOCAL, "depth", 0) or id(self) not in _JITS:
            return method(self, *args, **kwargs)
        return _call(self, fname, method, args, kwargs)

    call.__name__, call.__qualname__, call.__doc__ = method.__name__, method.__qualname__, method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


def _call(ns: Any, fname: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A top-level call: deferred while it matches the episode the tape speculates on, else run and taped."""
    tape = getattr(_LOCAL, "tape", None)
    if tape is None or tape.done or tape.ns is not ns:
        tape = _LOCAL.tape = Tape(ns)
    found = tape.call_key(fname, args, kwargs)
    if found is None:
        tape.materialize()
        with _Nested():
            return method(ns, *args, **kwargs)
    key, template = found
    if tape.episode is None and not tape.keys and (episode := _EPISODES.get(key)) is not None:
        tape.episode = episode
        _EPISODES.move_to_end(key)
    if tape.episode is not None:
        position, keys = len(tape.keys), tape.episode.keys
        if position < len(keys) and keys[position] == key:
            tape.keys.append(key)
            tape.templates.append(template)
            out = Deferred(ns, tape, position, tape.episode.metas[position])
            tape.deferred.append(weakref.ref(out))
            return out
        tape.materialize()
        return _call(ns, fname, method, args, kwargs)
    with _Nested():
        out = method(ns, *args, **kwargs)
    _record(tape, key, template, out)
    return out


def _record(tape: Tape, key: Any, template: tuple[str, tuple[Any, ...], dict[str, Any]], out: Any) -> None:
    """Append a call that ran to a recording tape (or stop it: a result that is no one-device Array,
    a `take` whose indices are not checkable, a tape too long)."""
    if type(out) is not Array or type(out._lb.device) is not str or len(tape.keys) >= MAX_TAPE:
        tape.stop()
        return
    if template[0] == "take" and not _take_check(tape, template, out):
        tape.stop()
        return
    lb = out._lb
    tape.produced[id(lb)] = (len(tape.keys), weakref.ref(lb))
    tape.keys.append(key)
    tape.templates.append(template)
    tape.metas.append((out.shape, out.dtype, out.device))


def _take_check(tape: Tape, template: tuple[str, tuple[Any, ...], dict[str, Any]], out: Array) -> bool:
    """Record the range check of a `take` whose indices are an external or a reshape of one."""
    _, args, kwargs = template
    if len(args) != 2 or type(args[0]) is not _Ref or type(args[1]) is not _Ref:
        return False
    source, indices = args
    if indices.kind == "t":
        fname, inner, _ = tape.templates[indices.index]
        if fname != "reshape" or type(inner[0]) is not _Ref or inner[0].kind != "x":
            return False
        indices = inner[0]
    elif indices.kind != "x":
        return False
    shape = tape.metas[source.index][0] if source.kind == "t" else tuple(tape.externals[source.index].shape)
    axis = kwargs.get("axis")
    tape.checks.append((indices.index, int(shape[0 if axis is None else axis])))
    return True


def read_back(array: Array) -> None:
    """Before a read-back of `array` (Array.__array__): a recording tape stores its episode when
    `array` is one of its results, and stops."""
    tape = getattr(_LOCAL, "tape", None)
    if tape is None or tape.done or tape.episode is not None:
        return
    tape.stop()
    lb = array._lb
    found = tape.produced.get(id(lb))
    if found is None or found[1]() is not lb:
        return
    position = found[0]
    first = tape.keys[0]
    episode = _EPISODES.get(first)
    if episode is None or episode.keys != tape.keys:
        episode = Episode(tape.keys, tape.metas, tape.checks)
    episode.points.setdefault((len(tape.keys), position), None)
    _EPISODES[first] = episode
    _EPISODES.move_to_end(first)
    while len(_EPISODES) > MAX_EPISODES:
        _EPISODES.popitem(last=False)


def read_planned(array: Deferred) -> None:
    """The read-back of a Deferred: through its episode's plan at a stored point whose index
    checks pass (the plan built on first use: it traces), else by materializing its tape. A plan
    that raises is dropped (the point is marked False) and the tape materializes: the eager path
    then gives the values, or raises its own error."""
    tape = array.tape
    episode, point = tape.episode, (len(tape.keys), array.index)
    if tape.done or episode is None or episode.points.get(point, False) is False or not _indices_ok(tape, episode):
        tape.materialize()
        return
    tape.stop()
    try:
        plan = episode.points[point]
        if plan is None:
            plan = episode.points[point] = _plan(tape, array.index)
        array._lb = plan(*tape.externals)
    except Exception:  # noqa: BLE001  (the eager path decides what the program sees)
        episode.points[point] = False
        tape.materialize()


def _indices_ok(tape: Tape, episode: Episode) -> bool:
    """Whether every `take` index of the tape is in range (else the eager path raises its error)."""
    for number, size in episode.checks:
        values = tape.ns._backend.to_numpy(tape.externals[number])
        if values.size and (int(values.min()) < -size or int(values.max()) >= size):
            return False
    return True


def _plan(tape: Tape, index: int) -> Any:
    """The capture of the tape's calls over its externals, returning result `index`'s LazyBuffer."""
    runner = Tape(tape.ns)
    runner.templates = list(tape.templates)
    count = len(runner.templates)

    def replay(*externals: Any) -> Any:
        return runner.run(count, list(externals))[index]

    replay.__qualname__ = f"xp tape of {count} calls"
    return _JITS[id(tape.ns)](replay)
