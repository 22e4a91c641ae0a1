"""fast.debug.graph writes DOT that parses, with one cluster per kernel of the schedule; GRAPH=1 writes
one picture per realize; DEBUG=2 prints the schedule table; `python -m fast.debug FILE.py` prints the
report of a script's last expression.

DOT is checked by a strict parser of the DOT grammar written here (every statement, attribute list,
quoted string and brace; edges only between declared nodes) and, when Graphviz's `dot` is installed,
by `dot -Tsvg` too (the SVG then has one cluster group per kernel)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
from fast import BinaryOps, ReduceOps, UnaryOps, config
from fast.ops import KernelOps

ROOT = Path(__file__).resolve().parents[2]
TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|^#[^\n]*|(?P<str>"(?:[^"\\]|\\.)*")|(?P<id>[A-Za-z_][A-Za-z_0-9]*)'
                   r'|(?P<num>-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?))|(?P<op>->|--|[{}\[\]=;,:])', re.S | re.M)


@dataclass
class Dot:
    """What the strict parser found: declared nodes, edges, clusters (name -> node ids)."""

    nodes: set[str] = field(default_factory=set)
    edges: list[tuple[str, str]] = field(default_factory=list)
    clusters: dict[str, set[str]] = field(default_factory=dict)


def tokens(text: str) -> list[str]:
    out, position = [], 0
    while position < len(text):
        match = TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"DOT: unexpected character {text[position]!r} at {position}")
        if match.lastgroup is not None:
            out.append(match.group(match.lastgroup))
        position = match.end()
    return out


class Parser:
    """graph : digraph ID? '{' stmt* '}'; stmt : attr_stmt | ID '=' ID | node_stmt | edge_stmt | subgraph."""

    def __init__(self, text: str) -> None:
        self.items, self.at, self.dot = tokens(text), 0, Dot()

    def peek(self) -> str | None:
        return self.items[self.at] if self.at < len(self.items) else None

    def take(self, expected: str | None = None) -> str:
        item = self.peek()
        if item is None or (expected is not None and item != expected):
            raise ValueError(f"DOT: expected {expected or 'a token'} at token {self.at}, got {item!r}")
        self.at += 1
        return item

    def ident(self) -> str:
        item = self.take()
        if item in "{}[]=;,:" or item in ("->", "--"):
            raise ValueError(f"DOT: expected an ID at token {self.at - 1}, got {item!r}")
        return item

    def parse(self) -> Dot:
        if self.take() != "digraph":
            raise ValueError("DOT: not a digraph")
        if self.peek() != "{":
            self.ident()
        self.body(None)
        if self.peek() is not None:
            raise ValueError(f"DOT: text after the graph: {self.peek()!r}")
        return self.dot

    def body(self, cluster: str | None) -> None:
        self.take("{")
        while self.peek() != "}":
            self.statement(cluster)
            if self.peek() == ";":
                self.take()
        self.take("}")

    def attrs(self) -> None:
        while self.peek() == "[":
            self.take("[")
            while self.peek() != "]":
                self.ident()
                self.take("=")
                self.ident()
                if self.peek() in (",", ";"):
                    self.take()
            self.take("]")

    def statement(self, cluster: str | None) -> None:
        if self.peek() in ("graph", "node", "edge"):
            self.take()
            self.attrs()
            return
        if self.peek() == "subgraph":
            self.take()
            name = self.ident()
            if name in self.dot.clusters:
                raise ValueError(f"DOT: subgraph {name} twice")
            self.dot.clusters[name] = set()
            self.body(name)
            return
        first = self.ident()
        if self.peek() == "=":
            self.take()
            self.ident()
        elif self.peek() == "->":
            while self.peek() == "->":
                self.take()
                second = self.ident()
                self.dot.edges.append((first, second))
                first = second
            self.attrs()
        else:
            self.attrs()
            if first in self.dot.nodes:
                raise ValueError(f"DOT: node {first} declared twice")
            self.dot.nodes.add(first)
            if cluster is not None:
                self.dot.clusters[cluster].add(first)


def parse_dot(text: str) -> Dot:
    dot = Parser(text).parse()
    missing = {end for edge in dot.edges for end in edge} - dot.nodes
    if missing:
        raise ValueError(f"DOT: edges to undeclared nodes {sorted(missing)}")
    return dot


def test_the_strict_parser_rejects_broken_dot() -> None:
    good = 'digraph g { a [label="x\\"y"]; subgraph cluster_0 { b; } a -> b; }'
    assert parse_dot(good).clusters == {"cluster_0": {"b"}}
    for bad in ('digraph g { a [label="x"; }', 'digraph g { a -> b; }', 'digraph g { a; a; }',
                'digraph g { a [label="unterminated]; }', "graph g { a; }", "digraph g { a; } }",
                'digraph g { subgraph cluster_0 { a; } subgraph cluster_0 { b; } }'):
        with pytest.raises(ValueError):
            parse_dot(bad)


def graph_inputs() -> list[Any]:
    """Two outputs: a softmax-like row kernel chain, a copy, a padded reduce and a sharded sum."""
    x = fast.from_numpy(np.arange(24, dtype=np.float32).reshape(4, 6) / 7, "CLANG")
    row = x.e(BinaryOps.SUB, x.r(ReduceOps.MAX, (1,)).expand((4, 6))).e(UnaryOps.EXP2)
    soft = row.e(BinaryOps.DIV, row.r(ReduceOps.SUM, (1,)).expand((4, 6)))
    padded = soft.e(BinaryOps.CMPLT, soft.const(0.1)).cast(fast.dtypes.float32).pad(((1, 1), (0, 0)))
    shards = fast.MultiLazyBuffer.from_sharded(padded.e(UnaryOps.LOG2).contiguous(), ("CLANG:1", "CLANG:2"), 0)
    total = shards.r(ReduceOps.SUM, (0,)).copy_to_device("CLANG")
    return [soft.copy_to_device("CLANG:1"), total]


def test_dot_output_parses_with_one_cluster_per_kernel(tmp_path: Path) -> None:
    outs = graph_inputs()
    kernels = sum(item.ast.op is KernelOps.SINK for item in fast.schedule(*outs))
    written = fast.debug.graph(*outs, path=tmp_path / "g.dot")
    text = (tmp_path / "g.dot").read_text()
    dot = parse_dot(text)
    clusters = [name for name in dot.clusters if name.startswith("cluster_")]
    assert kernels >= 3 and len(clusters) == kernels, text
    assert all(members for members in dot.clusters.values())
    assert "realized" in text and "shape=cds" in text and "peripheries=2" in text and "COPY" in text
    if shutil.which("dot") is None:
        assert written == [tmp_path / "g.dot"]
        return
    assert written == [tmp_path / "g.dot", tmp_path / "g.svg"]
    svg = (tmp_path / "g.svg").read_text()
    assert svg.count('class="cluster"') == kernels


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed (the DOT text is checked "
                    "by test_dot_output_parses_with_one_cluster_per_kernel either way)")
def test_png_pictures_render(tmp_path: Path) -> None:
    written = fast.debug.graph(*graph_inputs(), path=tmp_path / "pictures" / "g.png")
    assert written == [tmp_path / "pictures" / "g.dot", tmp_path / "pictures" / "g.png"]
    assert (tmp_path / "pictures" / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_graph_changes_nothing() -> None:
    outs = graph_inputs()
    before = len(fast.schedule(*outs))
    fast.debug.graph(*outs, path=Path("/dev/null"))
    assert len(fast.schedule(*outs)) == before and not outs[0].is_realized()


def test_graph_env_writes_one_picture_per_realize(tmp_path: Path) -> None:
    x = fast.from_numpy(np.arange(6, dtype=np.float32), "CLANG")
    with config.override(graph=True, graph_dir=str(tmp_path)):
        fast.realize(x.e(BinaryOps.ADD, x))
        fast.realize(x.e(BinaryOps.MUL, x).r(ReduceOps.SUM, (0,)))
        fast.realize(x)  # nothing to run: no picture
    files = sorted(tmp_path.glob("realize-*.dot"))
    assert len(files) == 2
    assert all(len(parse_dot(f.read_text()).clusters) == 1 for f in files)


def test_debug_2_prints_the_schedule_table(capsys: pytest.CaptureFixture[str]) -> None:
    x = fast.from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4), "CLANG")
    with config.override(debug=2):
        fast.realize(x.e(BinaryOps.ADD, x).r(ReduceOps.SUM, (1,)).copy_to_device("CLANG:1"))
    out = capsys.readouterr().out
    assert "schedule: 2 items, 1 kernels" in out
    header = next(line for line in out.splitlines() if "est. bytes" in line)
    assert all(column in header for column in ("kind", "kernel", "shape", "outputs", "inputs", "est. flops"))
    kernel = next(line for line in out.splitlines() if line.split()[:2] == ["0", "kernel"])
    assert "float32[2]" in kernel and "float32[8]" in kernel and "(2, 1)" in kernel
    assert re.search(r"copy\s+-\s+CLANG:1", out)


def test_the_command_line_reports_a_script(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    script.write_text("import numpy as np\nimport fast\n"
                      "x = fast.from_numpy(np.arange(6, dtype=np.float32), 'CLANG')\n"
                      "y = x.e(fast.BinaryOps.MUL, x.const(2.0)).r(fast.ReduceOps.SUM, (0,))\n"
                      "z = y.e(fast.BinaryOps.ADD, y)\n[y, z]\n")
    command = [sys.executable, "-m", "fast.debug", str(script), "--graph", str(tmp_path / "g.dot")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 nodes (5 traced)" in done.stdout and "every node agrees" in done.stdout
    assert parse_dot((tmp_path / "g.dot").read_text()).clusters
    named = subprocess.run([*command[:4], "--var", "x"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert named.returncode == 0 and "1 nodes (1 traced)" in named.stdout
    script.write_text("x = 1\n")
    broken = subprocess.run(command[:4], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert broken.returncode == 2 and "last statement is not an expression" in broken.stderr
