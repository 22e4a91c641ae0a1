"""`python -m fast.debug FILE.py [--var NAME] [--rtol R] [--atol A] [--graph PATH]`.

Runs the script under `fast.debug.trace()` (as `__main__`, with `sys.argv` = [FILE]), takes its last
expression (or the variable `--var`) as the buffer to check, a LazyBuffer or MultiLazyBuffer or a
list/tuple of them, and prints `fast.debug.compare(...)`; `--graph` also writes the graph picture
(fast.debug.graph; of `fast.debug.rebuild(...)` when the script realized the buffers). Exit status:
0 when every node agrees, 1 when one differs, 2 when the script or its last expression cannot give
buffers.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

from fast.debug import compare, graph, rebuild, trace
from fast.debug.trace import is_buffer


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fast.debug", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="a Python file whose last expression is the buffer to check")
    parser.add_argument("--var", help="check this variable of the script instead of its last expression")
    parser.add_argument("--rtol", type=float, help="extra relative tolerance (on top of docs/semantics.md)")
    parser.add_argument("--atol", type=float, help="extra absolute tolerance")
    parser.add_argument("--graph", help="also write the graph picture here (.dot, .svg or .png)")
    return parser.parse_args(argv)


def run_script(path: Path, var: str | None) -> Any:
    """Execute the script under trace(); its last expression's value (or `var`'s)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    last = None
    if var is None:
        final = tree.body[-1] if tree.body else None
        if not isinstance(final, ast.Expr):
            raise ValueError(f"{path}: the last statement is not an expression (name the buffer with --var)")
        tree.body.pop()
        last = ast.Expression(final.value)
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(path)}
    saved, sys.argv = sys.argv, [str(path)]
    try:
        with trace():
            exec(compile(tree, str(path), "exec"), namespace)  # noqa: S102 - running the user's script is the point
            if last is not None:
                return eval(compile(last, str(path), "eval"), namespace)  # noqa: S307
    finally:
        sys.argv = saved
    if var not in namespace:
        raise ValueError(f"{path}: the script defines no variable {var!r}")
    return namespace[var]


def buffers_of(value: Any) -> list[Any]:
    """The buffers in `value` (one, or a list/tuple of them); ValueError otherwise."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or not all(is_buffer(item) for item in items):
        raise ValueError(f"expected a LazyBuffer, a MultiLazyBuffer or a list of them, got {value!r}")
    return items


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        buffers = buffers_of(run_script(Path(args.script), args.var))
    except Exception as error:  # noqa: BLE001 - reported, with the script's own traceback
        import traceback
        traceback.print_exc()
        print(f"python -m fast.debug: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    report = compare(*buffers, rtol=args.rtol, atol=args.atol)
    print(report)
    if args.graph:
        realized = any(lb.is_realized() for b in buffers for lb in getattr(b, "lbs", [b]))
        drawn = rebuild(*buffers) if realized else buffers  # a realized graph has forgotten its sources
        paths = ", ".join(str(p) for p in graph(*drawn, path=args.graph))
        print(f"graph{' (rebuilt from the trace: the script realized it)' if realized else ''}: {paths}")
    return 0 if report.first is None else 1


if __name__ == "__main__":
    sys.exit(main())
