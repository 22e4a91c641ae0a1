"""examples/transformer.py's command line (issue 31): `--help` runs nothing, unknown options, one model
file without its config and devices `fast` cannot run here are refused (exit status 2, one line), and a
run leaves no temporary folder behind. The model run itself is replaced by a recorder: the numbers are
tested in test_xp_transformer.py."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from fast import xp

SPEC = importlib.util.spec_from_file_location("transformer_example_cli",
                                              Path(__file__).parents[2] / "examples" / "transformer.py")
assert SPEC is not None and SPEC.loader is not None
example = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = example  # dataclasses look their module up while the class is built
SPEC.loader.exec_module(example)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The calls of `compare` (the model run), each with whether its weights file existed then."""
    calls: list[dict[str, Any]] = []

    def record(path: str, config: Any, token_ids: Any, mask: Any, device: str = "CLANG") -> None:
        calls.append({"path": Path(path), "existed": Path(path).is_file(), "device": device})
    monkeypatch.setattr(example, "compare", record)
    return calls


def _refused(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        example.main(["transformer.py", *arguments])
    assert stopped.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_help_runs_nothing(runs, capsys):
    with pytest.raises(SystemExit) as stopped:
        example.main(["transformer.py", "--help"])
    assert stopped.value.code == 0 and "--minilm" in capsys.readouterr().out and runs == []


def test_bad_arguments_are_refused_before_anything_runs(runs, capsys):
    assert "unrecognized arguments: --layers" in _refused(["--layers", "3"], capsys)
    assert "MODEL and CONFIG go together: got 1 file(s)" in _refused(["model.safetensors"], capsys)
    assert "not both" in _refused(["--minilm", "model.safetensors", "config.json"], capsys)
    assert "device DISK:/tmp/x cannot run here" in _refused(["--device", "DISK:/tmp/x"], capsys)
    assert "unknown device 'GPU'" in _refused(["--device", "GPU"], capsys)
    if "CUDA" not in xp.__array_namespace_info__().devices():
        assert "device CUDA cannot run here" in _refused(["--device", "CUDA"], capsys)
    assert runs == []


def test_the_random_model_run_leaves_no_temporary_folder(runs, capsys):
    example.main(["transformer.py", "--device", "LLVM"])
    assert len(runs) == 1 and runs[0]["existed"] and runs[0]["device"] == "LLVM"
    assert not runs[0]["path"].parent.exists()
    assert "tiny random model" in capsys.readouterr().out
