"""reference reads DISK in time proportional to the bytes read (issue 28): `safe_load` maps the file and
reads its header only; realizing a tensor reads that tensor's bytes only; values and views unchanged."""
from __future__ import annotations

import json
import resource
import struct
from pathlib import Path

import numpy as np

import reference
from reference import dtypes

GIB = 1 << 30


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _sparse_file(path: Path, small: np.ndarray) -> None:
    """A safetensors file of a 2 GiB float32 tensor (a hole: no disk space, zeros) and a small one."""
    header = {"big": {"dtype": "F32", "shape": [GIB // 2], "data_offsets": [0, 2 * GIB]},
              "small": {"dtype": "F32", "shape": [small.size], "data_offsets": [2 * GIB, 2 * GIB + small.nbytes]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.seek(8 + len(raw) + 2 * GIB)
        handle.write(small.tobytes())


def test_load_reads_the_header_only_and_a_tensor_its_own_bytes(tmp_path: Path) -> None:
    small = np.linspace(-1, 1, 384, dtype=np.float32)
    path = tmp_path / "sparse.safetensors"
    _sparse_file(path, small)
    before = _peak_mib()
    tensors = reference.safe_load(str(path))
    assert tensors["big"].shape == (GIB // 2,) and tensors["big"].dtype == dtypes.float32
    assert np.array_equal(reference.to_numpy(tensors["small"]), small)
    view = tensors["big"].shrink(((1000, 1016),)).reshape((4, 4))
    assert np.array_equal(reference.to_numpy(view), np.zeros((4, 4), np.float32))
    assert _peak_mib() - before < 256  # reading the 2 GiB tensor (or its byte positions) would take GiBs


def test_large_tensors_keep_their_values_and_views(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"a": rng.standard_normal((512, 1024)).astype(np.float32),
              "b": rng.integers(-100, 100, (3, 1000, 333)).astype(np.int16),
              "c": rng.standard_normal(777).astype(np.float64)}
    path = str(tmp_path / "large.safetensors")
    reference.safe_save(path, {k: reference.from_numpy(v, "CLANG") for k, v in arrays.items()})
    tensors = reference.safe_load(path)
    for name, array in arrays.items():
        assert np.array_equal(reference.to_numpy(tensors[name]), array), name
    b = tensors["b"]
    assert np.array_equal(reference.to_numpy(b.shrink(((1, 2), (10, 20), (0, 333))).reshape((10, 333))),
                          arrays["b"][1, 10:20])
    assert np.array_equal(reference.to_numpy(b.permute((2, 1, 0)).copy_to_device("CLANG")), arrays["b"].transpose())
    halves = tensors["a"].reshape((512 * 1024,)).cast(dtypes.uint16, bitcast=True)
    assert np.array_equal(reference.to_numpy(halves), arrays["a"].reshape(-1).view(np.uint16))
