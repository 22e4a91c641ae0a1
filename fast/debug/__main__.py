"""`python -m fast.debug FILE.py [--var NAME | --realize [N]] [--rtol R] [--atol A] [--graph PATH] [-- ARGS]`.

Runs the script under `fast.debug.trace()` (as `__main__`, with `sys.argv` = [FILE, *ARGS]), takes its last
expression (or the variable `--var`) as what to check: a LazyBuffer, a MultiLazyBuffer, a fast.xp
array or a list/tuple of them, and prints `fast.debug.compare(...)`; `--graph` also writes the graph
picture (fast.debug.graph; of `fast.debug.rebuild(...)` when the script realized the buffers).
`--realize N` checks instead what the script's N-th read of computed values realizes (a
`fast.realize` or `fast.to_numpy`, e.g. `np.asarray` of a fast.xp array, whose buffers are not only
loaded, copied or viewed: reading weights does not count), when it is made: the script stops there,
so files it would remove later still exist (examples/transformer.py keeps its weights in a temporary
folder).
Exit status: 0 when every node agrees, 1 when one differs, 2 when nothing could be checked: a
missing file, a script that does not end in an expression, a value that is not buffers, a device this
machine cannot run (each one line on stderr), or the script raised (its traceback, then one line).
`--help` runs nothing; an argument it does not know is refused.
"""
from __future__ import annotations

import argparse
import ast
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

import fast
from fast.debug import compare, graph, inputs, rebuild, trace
from fast.debug.trace import READ_HOOKS, is_buffer
from fast.ops import LoadOps

PROGRAM = "python -m fast.debug"


class RefusedError(Exception):
    """A one-line reason why nothing can be checked (printed without a traceback)."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; what follows a `--` is the script's own arguments (`script_args`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    rest: list[str] = []
    if "--" in argv:
        argv, rest = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="a Python file whose last expression is the buffer to check")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--var", help="check this variable of the script instead of its last expression")
    which.add_argument("--realize", type=int, nargs="?", const=1, metavar="N",
                       help="check what the script's N-th read of computed values realizes (default 1), then stop")
    parser.add_argument("--rtol", type=float, help="extra relative tolerance (on top of docs/semantics.md)")
    parser.add_argument("--atol", type=float, help="extra absolute tolerance")
    parser.add_argument("--graph", help="also write the graph picture here (.dot, .svg or .png)")
    args = parser.parse_args(argv)
    args.script_args = rest
    return args


def _program(path: Path, var: str | None, expression: bool = True) -> tuple[ast.Module, ast.Expression | None]:
    """The script's statements and, without `var` and with `expression`, its last expression (taken
    out of them)."""
    if not path.is_file():
        raise RefusedError(f"{path}: no such file")
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as error:
        raise RefusedError(f"{path}:{error.lineno}: {error.msg}") from None
    if var is not None or not expression:
        return tree, None
    final = tree.body[-1] if tree.body else None
    if not isinstance(final, ast.Expr):
        raise RefusedError(f"{path}: the last statement is not an expression (end the script with the buffer to "
                      "check, or name it with --var)")
    tree.body.pop()
    return tree, ast.Expression(final.value)


def run_script(path: Path, var: str | None, expression: bool = True, script_args: list[str] | None = None) -> Any:
    """Execute the script under trace() with `sys.argv` = [path, *script_args]; its last expression's
    value (or `var`'s; nothing without `expression`). RefusedError for what is wrong before it runs;
    what the script raises propagates."""
    tree, last = _program(path, var, expression)
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(path)}
    saved, sys.argv = sys.argv, [str(path), *(script_args or [])]
    try:
        with trace():
            exec(compile(tree, str(path), "exec"), namespace)  # noqa: S102 - running the user's script is the point
            if last is not None:
                return eval(compile(last, str(path), "eval"), namespace)  # noqa: S307
    except SystemExit as exit_:
        raise RefusedError(f"{path} exited (sys.exit({exit_.code!r})) before giving what to check") from None
    finally:
        sys.argv = saved
    if not expression:
        return None
    if var not in namespace:
        raise RefusedError(f"{path}: the script defines no variable {var!r}")
    return namespace[var]


class _Stop(BaseException):  # noqa: N818 - not an error: ends the script once its read was checked
    """Raised by the `--realize` hook (a BaseException: the script's `except Exception` lets it pass)."""


def computed(value: Any) -> bool:
    """Whether a buffer is computed by an op (not only loaded, copied or viewed)."""
    return any(lb.base.op not in (LoadOps.EMPTY, LoadOps.COPY, LoadOps.VIEW, LoadOps.CONTIGUOUS, LoadOps.CONST)
               and not lb.base.is_realized() for lb in getattr(value, "lbs", [value]))


def at_read(args: argparse.Namespace, done: list[int | RefusedError]) -> Any:
    """The `--realize` hook: on the N-th read of computed buffers, check them (print the report, draw
    the graph) and stop the script (`done` gets the exit status)."""
    seen = [0]

    def hook(call: tuple[Any, ...]) -> None:
        values = [value for value in call if is_buffer(value)]
        if not values or not any(computed(value) for value in values):
            return
        seen[0] += 1
        if seen[0] == args.realize:
            try:
                done.append(report_on(values, args))
            except RefusedError as refusal:  # (raised past the script: it might catch an Exception)
                done.append(refusal)
            raise _Stop
    return hook


def buffers_of(value: Any, what: str = PROGRAM) -> list[Any]:
    """The buffers in `value` (one, or a list/tuple of them; a fast.xp array stands for its `.lazy`);
    TypeError otherwise, as `compare` raises it (`what`: whose value it is, for the message)."""
    return inputs.buffers(what, list(value) if isinstance(value, (list, tuple)) else [value])


def unusable_device(buffers: list[Any]) -> str | None:
    """Why a device the buffers live on cannot run on this machine (a value copied there and back
    fails), or None."""
    devices = sorted({device for b in buffers for device in (b.device if isinstance(b.device, tuple) else (b.device,))})
    for device in devices:
        try:
            fast.to_numpy(fast.from_numpy(np.zeros(1, dtype=np.float32), device))
        except Exception as error:  # noqa: BLE001 - any failure means the device is unusable here
            message = str(error).splitlines()[0] if str(error) else ""
            return f"device {device} cannot run on this machine ({type(error).__name__}: {message})"
    return None


def _checked(args: argparse.Namespace) -> list[Any]:
    """The buffers to compare; RefusedError (one line) when there are none to check."""
    try:
        return buffers_of(run_script(Path(args.script), args.var, script_args=args.script_args),
                          f"{args.script}: {'--var ' + args.var if args.var else 'its last expression'}")
    except TypeError as error:
        raise RefusedError(str(error)) from None


def _draw(buffers: list[Any], path: str) -> None:
    realized = any(lb.is_realized() for b in buffers for lb in getattr(b, "lbs", [b]))
    drawn = rebuild(*buffers) if realized else buffers  # a realized graph has forgotten its sources
    written = graph(*drawn, path=path)
    print(f"graph{' (rebuilt from the trace: the script realized it)' if realized else ''}: "
          f"{', '.join(str(p) for p in written)}")
    wanted = Path(path)
    picture = wanted if wanted.suffix in (".svg", ".png") else wanted.with_suffix(".svg")
    if picture not in written:
        print(f"{PROGRAM}: only the DOT file was written: Graphviz's `dot` is not on PATH to render "
              f"{picture} (install graphviz, or run `dot -T{picture.suffix[1:]} {written[0]} -o {picture}`)")


def report_on(buffers: list[Any], args: argparse.Namespace) -> int:
    """Print the report of `buffers` (and draw them with --graph); the exit status."""
    reason = unusable_device(buffers)
    if reason is not None:
        raise RefusedError(reason)
    report = compare(*buffers, rtol=args.rtol, atol=args.atol)
    print(report)
    if args.graph:
        _draw(buffers, args.graph)
    return 0 if report.first is None else 1


def _at_realize(args: argparse.Namespace) -> int:
    """--realize: run the script until its N-th read of computed values, checked by the hook."""
    done: list[int | RefusedError] = []
    hook = at_read(args, done)
    READ_HOOKS.append(hook)
    try:
        run_script(Path(args.script), args.var, expression=False, script_args=args.script_args)
    except _Stop:
        if isinstance(done[0], RefusedError):
            raise done[0] from None
        return done[0]
    finally:
        READ_HOOKS.remove(hook)
    raise RefusedError(f"{args.script} ended before its read number {args.realize} of computed values")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.realize is not None and args.realize < 1:
        print(f"{PROGRAM}: --realize {args.realize}: give a read number >= 1", file=sys.stderr)
        return 2
    try:
        if args.realize is not None:
            return _at_realize(args)
        buffers = _checked(args)
    except RefusedError as refusal:
        print(f"{PROGRAM}: {refusal}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the script's own error: its traceback, then one line
        message = str(error).splitlines()[0] if str(error) else ""
        if type(error).__module__.startswith("fast.runtime."):  # a device's runtime refused (no GPU, ...)
            print(f"{PROGRAM}: {args.script} uses a device this machine cannot run ({type(error).__name__}: "
                  f"{message})", file=sys.stderr)
            return 2
        traceback.print_exc()
        print(f"{PROGRAM}: {args.script} raised {type(error).__name__}: {message}", file=sys.stderr)
        return 2
    return report_on(buffers, args)


if __name__ == "__main__":
    sys.exit(main())
