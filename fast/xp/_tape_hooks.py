"""The hooks of call replay (fast/xp/_tape.py, whose docstring states the rules): the wrapper of
taped namespace functions (`taped`), recording and speculating a call, and the read-backs (of a
recorded result: store the episode; of a Deferred: run the episode's plan, or materialize).

Invariant: a call is deferred only while its key equals the episode's next key, under the
configuration the tape began with; a plan runs only at a read-back point the episode stored, of the
tape's only live Deferred, after the `take` index checks pass.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from fast.xp import _array, _tape
from fast.xp._array import Array
from fast.xp._tape import (
    _EPISODES,
    _LOCAL,
    EPISODES_LOCK,
    HOSTS,
    MAX_EPISODES,
    MAX_POINTS,
    MAX_TAPE,
    Deferred,
    Episode,
    Host,
    Tape,
    _Nested,
    _Ref,
    settle,
)


def enable(module: Any, host: Host, *hooks: list[Callable[..., Any]]) -> None:
    """Tape the calls of the namespace `module` through `host`. `hooks`: the lists of functions called
    before every realize and every configuration change (the engine's, the configuration's), which
    `settle` joins."""
    HOSTS[id(module.reshape.__self__)] = host
    _array.READ_HOOK = read_back
    for hook in hooks:
        if settle not in hook:
            hook.append(settle)


def taped(fname: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` (a namespace function) with its top-level calls taped (module docstring)."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_LOCAL, "depth", 0) or id(self) not in HOSTS:
            return method(self, *args, **kwargs)
        return _call(self, fname, method, args, kwargs)

    call.__name__, call.__qualname__, call.__doc__ = method.__name__, method.__qualname__, method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


def _untaped(ns: Any, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with _Nested():
        return method(ns, *args, **kwargs)


def _call(ns: Any, fname: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A top-level call: deferred while it matches the episode the tape speculates on, else run and taped."""
    host = HOSTS[id(ns)]
    context = host.context()
    tape = getattr(_LOCAL, "tape", None)
    if tape is not None and (tape.done or tape.ns is not ns or tape.context is not context):
        tape.materialize()  # (a tape that is done, or recording, has nothing to build)
        tape = None
    if context is None:
        return _untaped(ns, method, args, kwargs)
    if tape is None:
        tape = _LOCAL.tape = Tape(ns, host, context)
    found = tape.call_key(fname, args, kwargs)
    if found is None:
        tape.materialize()
        return _untaped(ns, method, args, kwargs)
    key, template = found
    if tape.episode is None and not tape.keys and (episode := _stored((context, key))) is not None:
        tape.speculate(episode)
    if tape.episode is not None:
        out = _defer(tape, key, template)
        return _call(ns, fname, method, args, kwargs) if out is None else out
    out = _untaped(ns, method, args, kwargs)
    _record(tape, key, template, out, args, kwargs)
    return out


def _stored(first: Any) -> Episode | None:
    """The episode stored under (context, first key), made the most recently used."""
    with EPISODES_LOCK:
        episode = _EPISODES.get(first)
        if episode is not None:
            _EPISODES.move_to_end(first)
    return episode


def _defer(tape: Tape, key: Any, template: tuple[str, tuple[Any, ...], dict[str, Any]]) -> Deferred | None:
    """The call's Deferred while its key is the episode's next one; else materialize (None)."""
    assert tape.episode is not None
    with tape.lock:
        position, keys = len(tape.keys), tape.episode.keys
        if not tape.done and position < len(keys) and keys[position] == key:
            tape.keys.append(key)
            tape.templates.append(template)
            out = Deferred(tape.ns, tape, tape.episode.refs[position], tape.episode.metas[position])
            tape.deferred.append(weakref.ref(out))
            return out
    tape.materialize()
    return None


def _record(tape: Tape, key: Any, template: tuple[str, tuple[Any, ...], dict[str, Any]], out: Any,
            args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Append a call that ran to a recording tape (or stop it: a result that is no one-device Array
    or is one of the arguments itself, a `take` whose indices are not checkable, a tape too long)."""
    if type(out) is not Array or type(out._lb.device) is not str or len(tape.keys) >= MAX_TAPE \
            or any(out is arg for arg in args) or any(out is arg for arg in kwargs.values()):
        tape.stop()
        return
    if template[0] == "take" and not _take_check(tape, template):
        tape.stop()
        return
    lb = out._lb
    tape.produced[id(lb)] = (len(tape.keys), weakref.ref(lb))
    tape.results[id(out)] = (len(tape.keys), weakref.ref(out), weakref.ref(lb))
    tape.keys.append(key)
    tape.templates.append(template)
    tape.metas.append((out.shape, out.dtype, out.device))


def _take_check(tape: Tape, template: tuple[str, tuple[Any, ...], dict[str, Any]]) -> bool:
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
    shape = tape.metas[source.index][0] if source.kind == "t" else tape.shapes[source.index]
    axis = kwargs.get("axis")
    tape.checks.append((indices.index, int(shape[0 if axis is None else axis])))
    return True


def read_back(array: Array) -> None:
    """Before a read-back of `array` (Array.__array__): a recording tape stores its episode when
    `array` is one of its results that shares no memory (module docstring), and stops."""
    tape = getattr(_LOCAL, "tape", None)
    if tape is None or tape.done or tape.episode is not None:
        return
    tape.stop()
    lb = array._lb
    found = tape.produced.get(id(lb))
    if found is None or found[1]() is not lb or not _own_memory(tape, lb):
        return
    first = (tape.context, tape.keys[0])
    with EPISODES_LOCK:
        episode = _EPISODES.get(first)
        if episode is None or episode.keys != tape.keys:
            episode = Episode(tape.keys, tape.metas, tape.checks)
        if len(episode.points) < MAX_POINTS:
            episode.points.setdefault((len(tape.keys), found[0]), None)
        _EPISODES[first] = episode
        _EPISODES.move_to_end(first)
        while len(_EPISODES) > MAX_EPISODES:
            _EPISODES.popitem(last=False)


def _own_memory(tape: Tape, lb: Any) -> bool:
    """Whether `lb` is a computed value with memory of its own: not a view or zero-copy view of
    memory that exists (the plan would return a copy, which no later assign reaches)."""
    base = lb.base
    return base.realized is None and base.op is not getattr(tape.ns._backend.Load, "VIEW", None)


def read_planned(array: Deferred) -> None:
    """The read-back of a Deferred: through its episode's plan at a stored point whose index
    checks pass, when it is its tape's only live Deferred (the plan built on first use: it
    traces), else by materializing its tape. A plan that raises is dropped (the point is marked
    False) and the tape materializes: the eager path then gives the values, or raises its own error."""
    tape = array.tape
    with tape.lock:
        episode, point = tape.episode, (len(tape.keys), array.index)
        usable = not tape.done and episode is not None and episode.points.get(point, False) is not False
        tape.stop()
        if usable:
            tape.finish()  # (the checks and the plan realize: `settle` must not build this tape)
    if not usable or [position for position, _ in tape.waiting()] != [array.index]:
        tape.materialize()
        if episode is not None and point not in episode.points:
            _learn_point(tape, episode, point, array)
        return
    assert episode is not None
    try:
        checked = _indices_ok(tape, episode)
    except Exception:  # noqa: BLE001  (e.g. read inside a trace: the eager path raises its own error)
        checked = False
    if not checked:
        tape.materialize()
        return
    try:
        array._lb = _run_plan(tape, episode, point)
    except Exception:  # noqa: BLE001  (the eager path decides what the program sees)
        episode.points[point] = False
        tape.materialize()
        return
    tape.materialized, tape.externals = True, []


def _learn_point(tape: Tape, episode: Episode, point: tuple[int, int], array: Deferred) -> None:
    """A speculating tape read back at a point its episode does not hold (the episode was recorded
    with a longer tape: a first call whose result was never read): the point is stored, as
    `read_back` stores a recording tape's, so the next tape like this one replays instead of
    materializing every time. The tape's keys are a prefix of the episode's (each matched)."""
    if not array.has_lb() or not _own_memory(tape, array._lb):
        return
    with EPISODES_LOCK:
        if len(episode.points) < MAX_POINTS:
            episode.points.setdefault(point, None)


def _run_plan(tape: Tape, episode: Episode, point: tuple[int, int]) -> Any:
    """Result `point[1]` of the tape through the episode's plan for `point` (built on first use)."""
    start = time.perf_counter()
    plan = episode.points[point]
    if plan is None:
        plan = episode.points[point] = _plan(tape, point[1])
    out = plan(*tape.externals)
    if tape.host.debug() >= 1:
        print(f"xp tape: {len(tape.keys)} calls read back through one plan in "
              f"{(time.perf_counter() - start) * 1e3:.2f} ms")
    return out


def _indices_ok(tape: Tape, episode: Episode) -> bool:
    """Whether every `take` index of the tape is in range (else the eager path raises its error)."""
    for number, size in episode.checks:
        values = tape.ns._backend.to_numpy(tape.externals[number])
        if values.size and (int(values.min()) < -size or int(values.max()) >= size):
            return False
    return True


def _plan(tape: Tape, index: int) -> Any:
    """The capture of the tape's calls over its externals, returning result `index`'s LazyBuffer."""
    runner = Tape(tape.ns, tape.host, tape.context)
    runner.templates = list(tape.templates)
    count = len(runner.templates)

    def replay(*externals: Any) -> Any:
        return runner.run(count, list(externals))[index]

    replay.__qualname__ = f"xp tape of {count} calls"
    return tape.host.jit(replay)


_tape.READ_BACK = read_planned  # (fast/xp/_tape.py calls it; this module imports that one, not the reverse)
