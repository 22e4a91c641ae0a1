"""Pictures of a lazy graph and of how its schedule cuts it into kernels: Graphviz DOT (and SVG/PNG).

`graph(*buffers, path)` writes the graph the buffers depend on, down to realized buffers:
- one node per base (op and arg, shape, dtype, device) and per view (shape; strides, offset, mask of
  its last view; how many views it stacks); edges from what is read to what reads it;
- realized buffers are grey boxes, copies blue, assigns red, the buffers asked for have a double border;
- each kernel of the schedule (`fast.schedule`) is a `subgraph cluster_<item>`, labelled with the item
  number, kernel name and iteration shape, holding a header node and the bases it computes (its
  outputs and what it inlines; a base inlined into several kernels is drawn in the first); a view sits
  in the cluster of its first reader. Copies and other non-kernel items mark their output node.
Planning changes nothing and runs nothing; kernel names come from the program cache, which compiles
a kernel not seen yet (as realizing would).

Files: `path` ending in .svg or .png is rendered by `dot` (the DOT text goes next to it as .dot);
another suffix is the DOT file, with an .svg beside it. Without `dot` on PATH only the DOT file is
written. Returns the paths written.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fast.debug.inputs import buffers as checked
from fast.debug.table import item_members, item_row
from fast.engine.schedule import Step, lazy_buffers, plan_schedule
from fast.graph.node import LazyBuffer
from fast.ops import KernelOps, LoadOps

MARKS = {"realized": 'shape=box, style=filled, fillcolor="#d9d9d9"', "COPY": "shape=cds, color=blue, fontcolor=blue",
         "ASSIGN": "color=red, fontcolor=red", "VIEW": "shape=ellipse, style=dashed",
         "base": "shape=box, style=rounded"}


def quote(text: str) -> str:
    """A DOT string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def walk(outs: Sequence[LazyBuffer]) -> tuple[list[LazyBuffer], list[tuple[LazyBuffer, LazyBuffer]]]:
    """Every node (bases and views) the outputs depend on, down to realized bases, and the edges."""
    seen: dict[int, LazyBuffer] = {}
    edges: list[tuple[LazyBuffer, LazyBuffer]] = []
    stack = list(outs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        reads = [node.base] if node.base is not node else ([] if node.realized is not None else list(node.srcs))
        edges += [(source, node) for source in reads]
        stack += reads
    return list(seen.values()), edges


def label(node: LazyBuffer) -> str:
    where = f"{tuple(node.shape)} {node.dtype.name}\n{node.device}"
    if node.base is not node:
        last = node.st.views[-1]
        mask = "" if last.mask is None else f" mask {last.mask}"
        stack = "" if len(node.st.views) == 1 else f"\n{len(node.st.views)} views"
        return f"view {where}\nstrides {last.strides} offset {last.offset}{mask}{stack}"
    arg = "" if node.arg is None or callable(node.arg) else f" {node.arg}"
    arg = arg if len(arg) <= 40 else arg[:37] + "..."
    return f"{node.op.name}{arg}\n{where}" + ("\nrealized" if node.realized is not None else "")


def style(node: LazyBuffer, outs: Sequence[LazyBuffer]) -> str:
    if node.base is not node:
        kind = "VIEW"
    elif node.realized is not None:
        kind = "realized"
    else:
        kind = node.op.name if node.op in (LoadOps.COPY, LoadOps.ASSIGN) else "base"
    return MARKS[kind] + (", peripheries=2" if any(node is out for out in outs) else "")


def _clusters(nodes: list[LazyBuffer], edges: list[tuple[LazyBuffer, LazyBuffer]],
              steps: Sequence[Step]) -> dict[int, int]:
    """Cluster (schedule item) of each node drawn inside one: bases by membership, views by first reader."""
    member: dict[int, int] = {}
    item_members(steps, 0, member)
    kernels = {index for index, step in enumerate(steps) if step.item.ast.op is KernelOps.SINK}
    where = {id(node): member[id(node)] for node in nodes
             if node.base is node and member.get(id(node)) in kernels and node.realized is None}
    for source, reader in edges:
        if source.base is not source and id(source) not in where and id(reader) in where:
            where[id(source)] = where[id(reader)]
    return where


def _node_line(names: dict[int, str], node: LazyBuffer, outs: Sequence[LazyBuffer]) -> str:
    return f"{names[id(node)]} [label={quote(label(node))}, {style(node, outs)}];"


def _cluster_lines(index: int, step: Step, members: list[str]) -> list[str]:
    row = item_row(step.item, index)
    title, header = f"kernel {index}: {row[2]} {row[4]}", f"{row[2]}\nbytes~{row[7]} flops~{row[8]}"
    return [f"  subgraph cluster_{index} {{", f"    label={quote(title)};", "    style=rounded; color=darkgreen;",
            f"    k{index} [shape=note, label={quote(header)}];", *("    " + line for line in members), "  }"]


def to_dot(outs: Sequence[LazyBuffer], steps: Sequence[Step]) -> str:
    """The DOT text (module docstring)."""
    nodes, edges = walk(outs)
    names = {id(node): f"n{number}" for number, node in enumerate(nodes)}
    where = _clusters(nodes, edges, steps)
    inside: dict[int, list[str]] = {}
    for node in nodes:
        if id(node) in where:
            inside.setdefault(where[id(node)], []).append(_node_line(names, node, outs))
    lines = ["digraph fast {", '  graph [fontname="monospace", fontsize=10];',
             '  node [fontname="monospace", fontsize=10];']
    for index, step in enumerate(steps):
        if step.item.ast.op is KernelOps.SINK:
            lines += _cluster_lines(index, step, inside.get(index, []))
    lines += ["  " + _node_line(names, node, outs) for node in nodes if id(node) not in where]
    lines += [f"  {names[id(source)]} -> {names[id(reader)]};" for source, reader in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot_file: Path, picture: Path) -> bool:
    """Render with `dot` when it is installed; False when it is not."""
    program = shutil.which("dot")
    if program is None:
        return False
    subprocess.run([program, f"-T{picture.suffix[1:]}", str(dot_file), "-o", str(picture)], check=True,
                   capture_output=True, timeout=120)
    return True


def write(text: str, path: Path) -> list[Path]:
    picture = path if path.suffix in (".svg", ".png") else path.with_suffix(".svg")
    dot_file = path.with_suffix(".dot") if path.suffix in (".svg", ".png") else path
    dot_file.parent.mkdir(parents=True, exist_ok=True)
    dot_file.write_text(text)
    return [dot_file, picture] if render(dot_file, picture) else [dot_file]


def graph(*buffers: Any, path: str | Path) -> list[Path]:
    """Write the graph of `buffers` (buffers or fast.xp arrays) and its schedule's kernels (module
    docstring); the paths written."""
    outs = lazy_buffers(checked("graph", buffers))
    return write(to_dot(outs, plan_schedule(outs)), Path(path))
