"""The conformance suite under MPI: `mpiexec -n 3 python -m conformance --mpi --profile mpi --devices CLANG,LLVM,DISK`.

Every rank must replay the identical program sequence, so rank 0 alone generates it: it runs the
usual Hypothesis worker (runner.Worker: generation, shrinking, minimizing) and the directed programs,
and sends each program, pickled, to every other rank just before replaying it itself. Rank 0 replays
it on `reference` and on `fast`, the other ranks on `fast` only. On the `fast` side `to_numpy` is
`fast.mpi.allgather`, so every rank ends up with the values (a rank holding a replica of an
unsharded buffer reads its own) and sends its outcome to rank 0, which compares rank 0's outcome and
every other rank's with reference by the runner's own rules (`check`, `compare`) and decides: a
replica that differs on one rank is a failure there, shrunk like any other.

Devices are spread over the ranks by renaming the generated programs (`placement`): the strategies
draw their usual names (`CLANG`, `CLANG:1`, `LLVM`, ...) and each becomes one owned by a rank, the
kinds interleaved, so the shards of one buffer sit on several ranks and kinds (with 3 ranks:
`CLANG@0`, `LLVM:1@1`, `CLANG:2@2`); the fourth device of a kind stays local to every rank (no
`@`), and DISK files stay local too (each rank has its own directory: other ranks rewrite the path).

Lockstep check: the errors (type and step) of every rank's replays must be rank 0's, and no transfer
may have timed out. A rank that raised elsewhere, or sent nothing within `REPORT_SECONDS`, has left
SPMD lockstep (its transfers no
longer match anyone's): rank 0 prints each side's errors and the program and aborts the job
(`MPI_Abort`, non-zero exit, no hang). An uncaught exception on any rank aborts it too.

Waiting is polite: a rank waiting for the next program, or rank 0 waiting for reports, polls
(`Iprobe`/`Test`) and sleeps between polls instead of blocking in MPI, whose blocking calls
busy-poll a core; `fast`'s own transfers wait the same way (fast/runtime/mpi.py). With 3 ranks on
2 cores a spinning rank would take a core from the ranks doing the work.
"""
from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from conformance.compare import Mismatch, binding_text, compare
from conformance.directed import directed_programs
from conformance.driver import Outcome, replay
from conformance.profiles import GenConfig
from conformance.program import Gather, Program, Shard, Step
from conformance.runner import PROGRAM_SECONDS, Checked, RunResult, Worker, _alarm, check
from conformance.strategies import programs

TAG_PROGRAM, TAG_REPORT = 71, 72  # on COMM_WORLD; fast's transfers use a private duplicate of it
REPORT_SECONDS = 2 * PROGRAM_SECONDS + 120  # rank 0 waits this long for a rank's report on one program
ABORT_PAUSE = 1.0  # seconds between a fatal message and MPI_Abort
ErrorKey = tuple[str, int, str] | None  # (type name, step, message) of a replay's error, None without one


def world() -> Any:
    """mpi4py's COMM_WORLD (ImportError, saying what to install, without mpi4py)."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError("conformance --mpi needs mpi4py (pip install 'fast-lazy[mpi]')") from error
    return MPI.COMM_WORLD


# ---------------------------------------------------------------- where devices live

def placement(cfg: GenConfig, ranks: int) -> dict[str, str]:
    """Each generic device name the strategies may draw -> its name in an MPI run over `ranks` ranks.

    Device `index` of the j-th kind becomes device `index` of kind `kinds[(index + j) % len(kinds)]`
    (a bijection for each index, so distinct names stay distinct), owned by rank `(index + j) % ranks`;
    with 3 or more devices per kind, the last one stays local to every rank. `X:0` keeps its spelling.
    """
    kinds, out = cfg.kinds, {}
    for j, kind in enumerate(kinds):
        count = cfg.count(kind)
        for index in range(count):
            target = kinds[(index + j) % len(kinds)]
            owner = "" if count >= 3 and index == count - 1 else f"@{(index + j) % ranks}"
            out[GenConfig.device(kind, index)] = GenConfig.device(target, index) + owner
            if index == 0:
                out[f"{kind}:0"] = f"{target}:0{owner}"
    return out


def rename_devices(program: Program, name: Callable[[str], str]) -> Program:
    """`program` with every device name in its steps (`device`, `devices`) replaced by name(old)."""
    return replace(program, steps=tuple(_rename_step(step, name) for step in program.steps))


def _rename_step(step: Step, name: Callable[[str], str]) -> Step:
    changes: dict[str, Any] = {}
    for f in fields(step):  # type: ignore[arg-type]
        value = getattr(step, f.name)
        if f.name == "device" and isinstance(value, str):
            changes["device"] = name(value)
        elif f.name == "devices" and isinstance(value, tuple):
            changes["devices"] = tuple(name(device) for device in value)
    return replace(step, **changes) if changes else step  # type: ignore[type-var]


def spmd(program: Program) -> bool:
    """Whether every rank can run `program` in lockstep: not one whose error depends on data that
    only the owning rank reads (an out-of-range gather index raises on that rank alone; the others,
    waiting for its values, time out: docs/mpi.md)."""
    return not (program.expect == "IndexError" and any(isinstance(step, Gather) for step in program.steps))


def _placed(mapping: dict[str, str]) -> Callable[[str], str]:
    return lambda device: mapping.get(device, device)


def _disk_moved(root_dir: str | None, my_dir: str | None) -> Callable[[str], str]:
    """Device names with rank 0's DISK directory replaced by this rank's."""
    if root_dir is None or my_dir is None:
        return lambda device: device
    old, new = f"DISK:{root_dir}/", f"DISK:{my_dir}/"
    return lambda device: new + device[len(old):] if device.startswith(old) else device


# ---------------------------------------------------------------- the candidate and messages

class GatheredFast(ModuleType):
    """`fast` whose `to_numpy` is `fast.mpi.allgather`: every rank gets the values (a rank holding a
    replica of an unsharded buffer reads its own). Named `fast`, so the driver finds `fast.config` and
    the compile counter through it."""

    def __init__(self) -> None:
        super().__init__("fast")
        import fast
        import fast.mpi
        self._fast = fast
        self.to_numpy = fast.mpi.allgather

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fast, name)


def _poll(ready: Callable[[], bool], seconds: float | None) -> bool:
    """Wait until ready() (sleeping between polls, up to 2 ms); False after `seconds` (None: no limit)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    pause = 1e-5
    while not ready():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 2e-3)
    return True


def _send(comm: Any, value: Any, dest: int, tag: int) -> None:
    request = comm.isend(value, dest=dest, tag=tag)
    _poll(lambda: bool(request.Test()), None)
    request.wait()


def _receive(comm: Any, source: int, tag: int, seconds: float | None = None) -> tuple[bool, Any]:
    """(True, the next pickled message from `source` with `tag`), or (False, None) after `seconds`."""
    if not _poll(lambda: bool(comm.Iprobe(source=source, tag=tag)), seconds):
        return False, None
    return True, comm.recv(source=source, tag=tag)


def mpi_snippet(snippet: str, ranks: int) -> str:
    """A failure's snippet (Program.render) made runnable under mpiexec: `fast`'s values gathered to
    rank 0 (to_numpy would refuse another rank's buffer); without the `python -m fast.debug` tail,
    which replays a graph in one process."""
    head = (f"import fast.mpi  # run: mpiexec -n {ranks} python -m mpi4py THIS_FILE.py (rank 0 prints fast's values)\n"
            "\ndef gathered(T, x):\n    return fast.mpi.gather(x, 0) if T is fast else T.to_numpy(x)\n")
    body = snippet.split("\n# The program's buffers, left lazy", 1)[0].replace("T.to_numpy(", "gathered(T, ")
    return body.replace("import reference, fast\n", f"import reference, fast\n{head}", 1)


def errors(outcomes: list[Outcome]) -> list[ErrorKey]:
    """Each replay's error as (type, step, message), None for a replay that raised nothing."""
    return [None if o.error is None else (o.error.kind, o.error.step, o.error.message) for o in outcomes]


def rank_mismatches(program: Program, rank: int, wanted: list[Outcome], theirs: list[Outcome],
                    known: list[Mismatch]) -> list[Mismatch]:
    """Rank `rank`'s disagreements with reference (its outcome per binding against `wanted`), by the
    runner's rules, except those whose signature is already `known`; each detail names the rank."""
    signatures, out = {m.signature for m in known}, []
    for run, (want, got) in enumerate(zip(wanted, theirs, strict=True)):
        where = f"on rank {rank}" + (f", binding {binding_text(program, run)}" if program.variables else "")
        for mismatch in compare(program.instantiate(run), want, got):
            if mismatch.signature not in signatures:
                signatures.add(mismatch.signature)
                out.append(Mismatch(mismatch.signature, f"{where}: {mismatch.detail}"))
    return out


TIMED_OUT = "did not complete within MPI_TIMEOUT"  # fast.runtime.mpi's message for a transfer nobody matched


def _same(a: list[ErrorKey], b: list[ErrorKey]) -> bool:
    """Whether two ranks stayed in lockstep: the same error type at the same step in each replay, and
    no transfer timed out (two ranks can both raise RuntimeError at one step for different reasons:
    one for the program, the other waiting for a transfer the first never made)."""
    if any(e is not None and TIMED_OUT in e[2] for e in (*a, *b)):
        return False
    return [e and e[:2] for e in a] == [e and e[:2] for e in b]


@contextmanager
def abort_on_error(comm: Any) -> Iterator[None]:
    """An exception escaping the block prints its traceback with this rank and aborts the whole job."""
    try:
        yield
    except Exception:  # noqa: BLE001 - any error on any rank must stop every rank
        print(f"conformance --mpi: rank {comm.Get_rank()} failed:\n{traceback.format_exc()}", file=sys.stderr,
              flush=True)
        abort(comm)


def abort(comm: Any) -> None:
    """MPI_Abort the job, after a pause that lets mpiexec forward what this rank printed (an abort
    kills every rank at once, and output still in transit would be lost)."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_PAUSE)
    comm.Abort(1)


# ---------------------------------------------------------------- rank 0 and the others

class Coordinator(Worker):
    """Rank 0's worker: sends each program to the other ranks just before checking it, then requires
    their replays' errors to be its own. Counts the programs whose shard step ran (`feature:sharded-program`)."""

    def __init__(self, comm: Any, cfg: GenConfig, shrink_seconds: float, deadline: float,
                 report: Callable[[int, int], None] | None = None) -> None:
        super().__init__(cfg, "fast", shrink_seconds, deadline, report)
        self.comm = comm
        self.candidate = GatheredFast()
        self.last_steps_run = 0

    def check(self, program: Program, captured: bool = False) -> Checked:
        """Under MPI the captured mode is off (`captured` is ignored): programs run in lockstep on every rank."""
        others = range(1, self.comm.Get_size())
        for rank in others:
            _send(self.comm, program, rank, TAG_PROGRAM)
        pairs: list[tuple[Outcome, Outcome]] = []
        with _alarm(PROGRAM_SECONDS):
            checked = check(program, self.expected, self.candidate, pairs)
        self.last_steps_run = checked.steps_run
        mine = errors([got for _, got in pairs])
        found = list(checked.mismatches)
        for rank in others:
            arrived, theirs = _receive(self.comm, rank, TAG_REPORT, REPORT_SECONDS)
            if not arrived or not _same(mine, errors(theirs)):
                self.diverged(program, mine, rank, errors(theirs) if arrived else None)
            found += rank_mismatches(program, rank, [want for want, _ in pairs], theirs, found)
        return replace(checked, mismatches=found)

    def record(self, program: Program, directed: bool = False) -> list[Any]:
        found = super().record(program, directed)
        if any(isinstance(step, Shard) for step in program.steps[:self.last_steps_run]):
            self.state.result.coverage["feature:sharded-program"] += 1
        return found

    def diverged(self, program: Program, mine: list[ErrorKey], rank: int, theirs: list[ErrorKey] | None) -> None:
        """Print how rank `rank` left lockstep on `program` and abort the job."""
        def text(found: list[ErrorKey] | None) -> str:
            if found is None:
                return f"no report within {REPORT_SECONDS} s"
            return "; ".join("no error" if e is None else f"{e[0]} at step {e[1]}: {e[2]}" for e in found)
        snippet = mpi_snippet(program.render("fast"), self.comm.Get_size())
        print(f"conformance --mpi: FAILURE: the ranks disagree on what `fast` did (they left SPMD lockstep)\n"
              f"rank 0: {text(mine)}\nrank {rank}: {text(theirs)}\n--- snippet ---\n{snippet}\n---------------",
              flush=True)
        abort(self.comm)


def serve(comm: Any, disk_dir: str | None) -> None:
    """Any rank but 0: replay on `fast` each program rank 0 sends (DISK paths moved to `disk_dir`)
    and send rank 0 the outcomes (values included), until rank 0 sends None."""
    _, setup = _receive(comm, 0, TAG_PROGRAM)
    moved, back = _disk_moved(setup["disk_dir"], disk_dir), _disk_moved(disk_dir, setup["disk_dir"])
    candidate = GatheredFast()
    while True:
        _, program = _receive(comm, 0, TAG_PROGRAM)
        if program is None:
            return
        program = rename_devices(program, moved)
        outcomes = [replay(candidate, program, run=run) for run in range(program.runs)]
        for outcome in outcomes:  # the devices recorded as rank 0 names them
            outcome.shapes = {index: (shape, dtype, _rename_recorded(device, back))
                              for index, (shape, dtype, device) in outcome.shapes.items()}
        _send(comm, outcomes, 0, TAG_REPORT)


def _rename_recorded(device: object, name: Callable[[str], str]) -> object:
    """A recorded device property (a name, or a tuple of names for a multi buffer) renamed."""
    if isinstance(device, tuple):
        return tuple(name(d) for d in device)
    return name(device) if isinstance(device, str) else device


def coordinate(comm: Any, cfg: GenConfig, examples: int, seed: int, shrink_seconds: float, time_limit: float,
               progress: Callable[[int, int], None] | None) -> RunResult:
    """Rank 0: the directed programs, then `examples` random ones (until `time_limit` seconds), every
    device name placed over the ranks; then tells the other ranks to stop."""
    others = range(1, comm.Get_size())
    for rank in others:
        _send(comm, {"disk_dir": cfg.disk_dir}, rank, TAG_PROGRAM)
    place = _placed(placement(cfg, comm.Get_size()))
    worker = Coordinator(comm, cfg, shrink_seconds, time.time() + time_limit, progress)
    worker.run_directed([rename_devices(program, place) for program in directed_programs(cfg) if spmd(program)])
    strategy: st.SearchStrategy[Program] = programs(cfg).map(lambda program: rename_devices(program, place))
    result = worker.run(examples + worker.state.result.examples, seed, strategy)
    for failure in result.failures.values():
        failure.snippet = mpi_snippet(failure.snippet, comm.Get_size())
    for rank in others:
        _send(comm, None, rank, TAG_PROGRAM)
    return result


def run(cfg: GenConfig, examples: int, seed: int, shrink_seconds: float, time_limit: float,
        progress: Callable[[int, int], None] | None = None) -> RunResult | None:
    """Called on every rank: rank 0 coordinates and returns the result, the others serve and return
    None. An exception on any rank aborts the job."""
    comm = world()
    with abort_on_error(comm):
        if comm.Get_rank() != 0:
            serve(comm, cfg.disk_dir)
            return None
        return coordinate(comm, cfg, examples, seed, shrink_seconds, time_limit, progress)
    return None  # (abort_on_error aborted the job)


def describe(cfg: GenConfig, ranks: int) -> str:
    """`CLANG->CLANG@0, CLANG:1->LLVM:1@1, ...`: where the generic devices live in this run."""
    return ", ".join(f"{generic}->{placed}" for generic, placed in placement(cfg, ranks).items()
                     if not generic.endswith(":0"))
