"""`python -m bench` and `python -m bench.contention` as a new user meets them (issue 31): `--help` runs
nothing, unknown options and devices this machine cannot run are refused before anything runs, results
go into bench/results/ only when asked, and the last line names exactly the files written."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from bench import RESULTS_DIR, cli, contention
from bench.outputs import destination, unusable_device


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the bench ran although it should have stopped first")
    monkeypatch.setattr(cli, "measure", refuse)
    monkeypatch.setattr(contention, "run_contention", refuse)


@pytest.mark.parametrize("main", [cli.main, contention.main], ids=["bench", "contention"])
def test_help_runs_nothing_and_unknown_options_are_refused(main, nothing_runs, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0 and "--save" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        main(["--no-such-option"])
    assert stopped.value.code == 2 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def _cannot_run() -> list[str]:
    """Devices no machine runs the bench on, and CUDA where this machine has no GPU."""
    return ["DISK:/tmp/bench-data", "NOSUCH"] + (["CUDA"] if unusable_device("CUDA") else [])


@pytest.mark.parametrize("main", [cli.main, contention.main], ids=["bench", "contention"])
def test_devices_that_cannot_run_here_are_refused_in_one_line(main, nothing_runs, capsys):
    for device in _cannot_run():
        assert main(["--devices", f"CLANG,{device}"]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and device in lines[0], captured.err
        assert captured.out == ""


@pytest.mark.parametrize("arguments,where", [([], "temporary"), (["--save"], "results"),
                                              (["--out-prefix", "mine"], "results"), (["--out-dir", "{tmp}"], "tmp")])
def test_results_go_to_bench_results_only_when_asked(arguments, where, tmp_path):
    options = cli.parse_args([argument.format(tmp=tmp_path) for argument in arguments])
    folder, prefix = destination(options, cli.DEFAULT_PREFIX)
    try:
        expected = {"temporary": folder.parent == Path(tempfile.gettempdir()), "results": folder == RESULTS_DIR,
                    "tmp": folder == tmp_path}
        assert expected[where], folder
        assert prefix == ("mine" if "--out-prefix" in arguments else "latest")
    finally:
        if where == "temporary":
            shutil.rmtree(folder)


def test_a_quick_run_writes_into_a_temporary_folder_and_says_which_files(capsys):
    status = cli.main(["--quick", "--only", "elementwise", "--devices", "CLANG", "--peers", "", "--no-png",
                       "--budget", "0.01", "--max-repeats", "1", "--bandwidth-mib", "8"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    written = [Path(path) for path in last.split("wrote ", 1)[1].split(", ")]
    folder = written[0].parent
    try:
        assert status == 0
        assert folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith("fast-bench-")
        assert sorted(path.name for path in folder.iterdir()) == sorted(path.name for path in written)
        assert sorted(path.name for path in written) == ["latest.json", "latest.md"]  # no PNG: --no-png
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("relative_to_out_dir", [False, True])
def test_a_prefix_with_a_folder_names_its_folder(relative_to_out_dir, tmp_path, monkeypatch):
    """`--out-prefix results/s14-full` writes results/s14-full.* under the current folder (or under
    --out-dir), the folder made before anything runs; a session's first full run had crashed after ten
    minutes, on its PNG, with the prefix joined under bench/results/ into a folder that did not exist."""
    monkeypatch.chdir(tmp_path)
    arguments = ["--out-prefix", "runs/s14/full"]
    if relative_to_out_dir:
        arguments += ["--out-dir", str(tmp_path / "elsewhere")]
    folder, prefix = destination(cli.parse_args(arguments), cli.DEFAULT_PREFIX)
    assert prefix == "full" and folder.is_dir()
    assert folder == (tmp_path / "elsewhere" if relative_to_out_dir else tmp_path) / "runs" / "s14"
    absolute = tmp_path / "abs" / "name"
    folder, prefix = destination(cli.parse_args(["--out-prefix", str(absolute)]), cli.DEFAULT_PREFIX)
    assert (folder, prefix) == (absolute.parent, "name") and folder.is_dir()
