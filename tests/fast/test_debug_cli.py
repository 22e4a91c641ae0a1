"""`python -m fast.debug` and what fast.debug accepts (issue 31): fast.xp arrays wherever buffers are
accepted, one exception type for one bad input, messages that compute nothing, one line (no traceback)
for a missing file, a script without a final expression or a device this machine cannot run, `--help`
that runs nothing, unknown arguments refused, and why `--graph` wrote only the DOT file."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fast
import fast.debug
import fast.xp as xp
from fast.debug.__main__ import main

SCRIPT = '''import numpy as np
import fast.xp as xp
x = xp.asarray(np.arange(4, dtype=np.float32), device="CLANG")
y = x * 2 + 1
y
'''


def _write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def test_compare_graph_and_rebuild_take_fast_xp_arrays(tmp_path: Path) -> None:
    a = xp.asarray(np.arange(6, dtype=np.float32), device="CLANG")
    out = xp.sum(a * a)
    report = fast.debug.compare(out)
    assert report.first is None, str(report)
    assert fast.debug.graph(out, path=tmp_path / "g.dot")[0].exists()
    assert not out.lazy.is_realized()
    assert len(fast.debug.rebuild(out)) == 1


def test_the_function_and_the_cli_raise_the_same_type_and_compute_nothing(tmp_path: Path) -> None:
    class Wrapper:  # another library's array: has a `.lazy` but is not a fast.xp array
        lazy = None
    for bad in (np.ones(3), Wrapper(), 3):
        with pytest.raises(TypeError, match="fast.xp arrays"):
            fast.debug.compare(bad)
    with pytest.raises(TypeError, match=r"\.lazy"):
        fast.debug.compare(Wrapper())
    from fast.debug.__main__ import buffers_of
    with pytest.raises(TypeError, match="fast.xp arrays"):
        buffers_of([np.ones(3)])
    lazy_array = xp.asarray(np.ones(3, np.float32), device="CLANG") + 1
    with pytest.raises(TypeError) as raised:
        fast.debug.compare(lazy_array, np.ones(3))
    assert "ndarray of shape (3,)" in str(raised.value)
    from fast.debug.inputs import describe
    assert describe(lazy_array) == "fast.xp array of shape (3,), float32, on CLANG"
    assert not lazy_array.lazy.is_realized()  # describing it computed nothing


def test_the_cli_checks_a_script_ending_in_a_fast_xp_array(tmp_path: Path, capsys: Any) -> None:
    assert main([_write(tmp_path, "ok.py", SCRIPT)]) == 0
    assert "every node agrees" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "text", "says"), [
    ("missing.py", None, "no such file"),
    ("noexpr.py", "x = 1\n", "the last statement is not an expression"),
    ("notbuf.py", "[1, 2]\n", "its last expression: expected LazyBuffers"),
    ("novar.py", "x = 1\n", "defines no variable 'y'"),
])
def test_the_cli_refuses_in_one_line(tmp_path: Path, capsys: Any, name: str, text: str | None, says: str) -> None:
    path = _write(tmp_path, name, text) if text is not None else str(tmp_path / name)
    assert main([path, *(["--var", "y"] if name == "novar.py" else [])]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_the_cli_refuses_a_device_this_machine_cannot_run(tmp_path: Path, capsys: Any) -> None:
    from conformance.__main__ import unusable_device
    if unusable_device("fast", ("CUDA",)) is None:
        pytest.skip("this machine runs CUDA: nothing to refuse")
    script = "import numpy as np\nimport fast\nx = fast.from_numpy(np.ones(3, np.float32), 'CUDA')\nx\n"
    assert main([_write(tmp_path, "cuda.py", script)]) == 2
    err = capsys.readouterr().err
    assert "cannot run" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_the_cli_says_why_only_the_dot_file_was_written(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None if name == "dot" else
                        which(name, *args, **kwargs))  # as on a machine without Graphviz
    assert main([_write(tmp_path, "ok.py", SCRIPT), "--graph", str(tmp_path / "g.svg")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "g.dot").exists() and not (tmp_path / "g.svg").exists()
    assert "only the DOT file was written" in out and "dot` is not on PATH" in out


def test_help_runs_nothing_and_unknown_arguments_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = _write(tmp_path, "touch.py", f"open({str(marker)!r}, 'w').close()\n1\n")
    helped = subprocess.run([sys.executable, "-m", "fast.debug", script, "--help"], capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "usage:" in helped.stdout and not marker.exists()
    with pytest.raises(SystemExit) as refused:
        main([script, "--bogus"])
    assert refused.value.code == 2 and not marker.exists()


def test_realize_checks_the_first_read_of_computed_values_and_stops_there(tmp_path: Path, capsys: Any) -> None:
    script = _write(tmp_path, "reads.py", '''import numpy as np
import fast
import fast.xp as xp
w = fast.from_numpy(np.arange(4, dtype=np.float32), "CLANG")
print("weights", fast.to_numpy(w))  # a read of loaded values: not counted
y = xp.asarray(w) * 3 - 1
print("y", np.asarray(y))  # the first read of computed values: checked here
raise SystemExit("not reached")
''')
    assert main([script, "--realize"]) == 0
    out = capsys.readouterr().out
    assert "weights" in out and "compare: " in out and "every node agrees" in out and "y [" not in out
    assert main([script, "--realize", "2"]) == 2
    assert "exited (sys.exit('not reached')) before giving what to check" in capsys.readouterr().err
    quiet = _write(tmp_path, "quiet.py",
                   "import numpy as np\nimport fast\nfast.to_numpy(fast.from_numpy(np.ones(2), 'CLANG'))\n")
    assert main([quiet, "--realize"]) == 2
    assert "ended before its read number 1 of computed values" in capsys.readouterr().err


def test_arguments_after_a_double_dash_go_to_the_script(tmp_path: Path, capsys: Any) -> None:
    script = _write(tmp_path, "args.py", '''import sys
import numpy as np
import fast.xp as xp
xp.asarray(np.full(3, float(len(sys.argv)), dtype=np.float32), device="CLANG") + float(sys.argv[1])
''')
    assert main([script, "--", "2.5"]) == 0
    assert "every node agrees" in capsys.readouterr().out
