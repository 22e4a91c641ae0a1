"""The README's example runs as written and prints what the README says it prints."""
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _example_and_output() -> tuple[str, str]:
    text = README.read_text()
    section = text.split("## Example", 1)[1]
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, flags=re.S)[:2]
    return code, printed


def test_readme_example_prints_what_readme_says():
    code, printed = _example_and_output()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    assert out.getvalue() == printed


def test_readme_example_agrees_with_reference():
    code, printed = _example_and_output()
    first_line = code.splitlines()[-1]
    assert "schedule" in first_line  # the last line counts kernels: fast-only; the rest runs on reference
    body = "\n".join(code.splitlines()[:-1]).replace("import fast ", "import reference as fast ")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(body, str(README), "exec"), {"__name__": "__readme__"})
    assert out.getvalue() == printed.splitlines(keepends=True)[0]
