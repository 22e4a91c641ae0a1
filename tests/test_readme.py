"""Every example in README.md and docs/*.md runs as written and prints what the page says it prints.

The convention for fenced blocks in these files (checked here, so nothing goes untested by accident):
- Every fence names its language: `python`, `text` or `bash`. A bare fence fails this test.
- ```python blocks run, on a machine without a GPU, in a few seconds (small sizes). The blocks of one
  file run in order in one namespace, so a later block may use names an earlier one defined; each file
  starts from a fresh namespace in a fresh temporary working directory.
- ```text blocks hold output (printed values, tables, logs, diagrams). One that follows a ```python
  block with only blank lines, or one line saying "prints" (e.g. "prints:"), between them is that
  block's standard output, and must equal it exactly.
- ```bash blocks are shell commands and do not run here: commands that need a GPU, an MPI launch,
  a download or minutes go there.
- A python block holding a line `import A as B  # or: import C as B` (or `import fast  # or: import
  reference as fast`) promises the swap works: it runs a second time with that import swapped, on a
  copy of the namespace, and must print the same.
"""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "text", "bash")
FENCE = re.compile(r"^ {0,3}```(.*)$")
SWAP = re.compile(r"^(\s*)import (\w+)(?: as (\w+))?\s*# or: import (\w+) as (\w+)\s*$", re.M)
PRINTS = re.compile(r"^\s*(\S+\s+)?prints\b.{0,40}$", re.I)


@dataclass
class Block:
    """A fenced block: its language, its text, the line its fence opens on, and the prose before it
    (back to the previous block's closing fence)."""

    language: str
    text: str
    line: int
    before: str


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, in order; ValueError for an unclosed fence."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    opened: tuple[str, int] | None = None
    body: list[str] = []
    prose: list[str] = []
    for number, line in enumerate(lines, start=1):
        match = FENCE.match(line)
        if opened is None and match is not None:
            opened, body = (match.group(1).strip(), number), []
        elif opened is not None and match is not None and not match.group(1).strip():
            found.append(Block(opened[0], "\n".join(body) + "\n", opened[1], "\n".join(prose)))
            opened, prose = None, []
        elif opened is not None:
            body.append(line)
        else:
            prose.append(line)
    if opened is not None:
        raise ValueError(f"{page.name}:{opened[1]}: fence never closed")
    return found


def expected_output(page_blocks: list[Block], index: int) -> str | None:
    """The text block that is block `index`'s printed output, by the convention above, else None."""
    if index + 1 >= len(page_blocks):
        return None
    after = page_blocks[index + 1]
    between = [line for line in after.before.splitlines() if line.strip()]
    if after.language != "text" or len(between) > 1 or (between and not PRINTS.match(between[0])):
        return None
    return after.text


def swapped(code: str) -> str | None:
    """`code` with its `# or: import ...` line's alternative import in place, or None without one."""
    match = SWAP.search(code)
    if match is None:
        return None
    indent, _, _, other, alias = match.groups()
    line = f"{indent}import {other}" + ("" if other == alias else f" as {alias}")
    return code[:match.start()] + line + code[match.end():]


def run(code: str, namespace: dict[str, object], where: str) -> str:
    """Execute `code` in `namespace`; returns what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), namespace)
    return out.getvalue()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_fence_names_a_known_language(page: Path):
    unnamed = [f"{page.name}:{block.line}: ```{block.language}" for block in blocks(page)
               if block.language not in LANGUAGES]
    assert not unnamed, f"fences must be one of {LANGUAGES} (tests/test_readme.py): {unnamed}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_python_blocks_run_and_print_what_the_page_says(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    page_blocks = blocks(page)
    for index, block in enumerate(page_blocks):
        if block.language != "python":
            continue
        where = f"{page.relative_to(ROOT)}:{block.line}"
        alternative = swapped(block.text)
        before = dict(namespace)
        printed = run(block.text, namespace, where)
        expected = expected_output(page_blocks, index)
        if expected is not None:
            assert printed == expected, f"{where} printed\n{printed}\ninstead of\n{expected}"
        if alternative is not None:
            assert run(alternative, before, where) == printed, f"{where}: the swapped import prints otherwise"


def test_the_convention_is_enforced():
    """The parser reads fences, outputs and swaps as the docstring says (a planted page)."""
    page = ("Intro\n```python\nimport fast  # or: import reference as fast\nprint(1)\n```\n\nprints:\n\n"
            "```text\n1\n```\n```bash\nls\n```\nprose\n```text\nnot an output\n```\n")
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(__import__("tempfile").TemporaryDirectory()))
        (folder / "page.md").write_text(page)
        found = blocks(folder / "page.md")
    assert [block.language for block in found] == ["python", "text", "bash", "text"]
    assert expected_output(found, 0) == "1\n" and expected_output(found, 2) is None
    assert swapped(found[0].text) == "import reference as fast\nprint(1)\n"


def test_readme_states_the_commands_ci_runs():
    """The README's test and main-job commands are the ones .ci/run runs."""
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    for command in ("python -m pytest -n auto -q tests", "python -m conformance --profile ci"):
        assert command in ci and command in readme, command


def test_mpi_md_counts_the_directed_programs_the_mpi_job_runs():
    """docs/mpi.md's "N of M with these devices": the directed programs every rank can run in lockstep
    under CI's `--devices CLANG,LLVM,DISK`, of all the directed programs for those devices."""
    import dataclasses

    from conformance.directed import directed_programs
    from conformance.mpi_driver import spmd
    from conformance.profiles import PROFILES

    stated = re.search(r"(\d+) of (\d+) with these devices", (ROOT / "docs" / "mpi.md").read_text())
    assert stated is not None
    config = dataclasses.replace(PROFILES["mpi"].gen, kinds=("CLANG", "LLVM"), disk_dir="/nonexistent-disk-dir")
    programs = directed_programs(config)
    assert (int(stated.group(1)), int(stated.group(2))) == (sum(map(spmd, programs)), len(programs))
