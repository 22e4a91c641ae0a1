"""safetensors over DISK (issue 10), the same tests for `reference` and `fast` (the ``impl`` fixture):
interoperability with the `safetensors` package, loading (laziness, sources, round trips) and saving
(atomic, refusals). Hostile files and the mutation test: test_ref_safetensors_hostile.py.

Oracles are independent of both packages: the `safetensors` package itself (its numpy API for every
dtype numpy has, its core ``serialize``/``deserialize`` for BF16 and 8-bit floats; the tests that use
it skip, saying why, only when it is not importable: it is in the ``test`` extra), and the numpy +
json helpers of safetensors_util.py for raw files. Every file lives under the test's own tmp_path.
"""
from __future__ import annotations

import os
import stat
from typing import Any

import numpy as np
import pytest
import safetensors_util as util
from safetensors_util import CODES, NAMES, NUMPY_CODES, bits, loaded_bits, ours, parse_oracle, raw_file, sample


@pytest.fixture
def package() -> Any:
    """The safetensors package (the interoperability oracle)."""
    return pytest.importorskip("safetensors", reason="the safetensors package (test extra) is not importable")


@pytest.fixture
def st_numpy(package: Any) -> Any:
    """Its numpy API: save_file / load_file."""
    import safetensors.numpy
    return safetensors.numpy


# ---------------------------------------------------------------- interoperability with the safetensors package


SHAPES = [(3, 5), (7,), (), (2, 0, 3), (1, 1, 4)]


@pytest.mark.parametrize("code", list(NUMPY_CODES))
def test_files_written_by_safetensors_load_identically(impl, tmp_path, st_numpy, code):
    arrays = {f"t{i}": sample(code, shape, seed=i) for i, shape in enumerate(SHAPES)}
    arrays["other"] = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)  # another dtype in the same file
    st_numpy.save_file(arrays, tmp_path / "m.safetensors", metadata={"format": "np", "code": code})
    loaded = impl.safe_load(tmp_path / "m.safetensors")
    assert sorted(loaded) == sorted(arrays) and loaded.unsupported == {}
    for name, want in arrays.items():
        tensor = loaded[name]
        assert tensor.device == f"DISK:{tmp_path / 'm.safetensors'}" and tensor.shape == want.shape
        assert tensor.dtype == getattr(impl.dtypes, NAMES[code] if name != "other" else "float32")
        got = impl.to_numpy(tensor.copy_to_device("CLANG"))
        assert got.dtype == want.dtype and got.shape == want.shape and bits(got) == bits(want)
    assert impl.safe_load_metadata(tmp_path / "m.safetensors") == {"format": "np", "code": code}


def test_bfloat16_written_by_safetensors_loads_bit_exactly(impl, tmp_path, package):
    patterns = np.array([0x3F80, 0x7FC1, 0xFF81, 0x0001, 0x8000, 0x7F80, 0xC2F7], dtype=np.uint16)  # NaN payloads
    (tmp_path / "b.safetensors").write_bytes(util.package_bytes(package, "BF16", patterns))
    tensor = impl.safe_load(tmp_path / "b.safetensors")["x"]
    assert tensor.dtype == impl.dtypes.bfloat16 and tensor.shape == (7,)
    assert loaded_bits(impl, tensor) == patterns.tobytes()


@pytest.mark.parametrize("code", CODES)
def test_safe_save_output_loads_in_safetensors(impl, tmp_path, package, st_numpy, code):
    arrays = {f"t{i}": sample(code, shape, seed=i) for i, shape in enumerate(SHAPES)}
    impl.safe_save(tmp_path / "out.safetensors", {name: ours(impl, code, a) for name, a in arrays.items()},
                   metadata={"written by": impl.__name__})
    blob = (tmp_path / "out.safetensors").read_bytes()
    parsed = dict(package.deserialize(blob))
    assert sorted(parsed) == sorted(arrays)
    for name, want in arrays.items():
        assert parsed[name]["dtype"] == code and tuple(parsed[name]["shape"]) == want.shape
        assert bytes(parsed[name]["data"]) == bits(want)
    if code != "BF16":  # numpy has no bfloat16: the package's numpy API cannot return it
        for name, got in st_numpy.load_file(tmp_path / "out.safetensors").items():
            assert got.dtype == arrays[name].dtype and bits(got) == bits(arrays[name])
    header, data = parse_oracle(blob)
    assert header["__metadata__"] == {"written by": impl.__name__} and (len(blob) - len(data)) % 8 == 0


def test_dtypes_the_project_lacks_fail_only_when_used(impl, tmp_path, package, st_numpy):
    st_numpy.save_file({"c": np.array([1 + 2j, 3j], dtype=np.complex64), "ok": np.arange(4, dtype=np.int16)},
              tmp_path / "c.safetensors")
    loaded = impl.safe_load(tmp_path / "c.safetensors")
    assert impl.to_numpy(loaded["ok"]).tolist() == [0, 1, 2, 3]
    assert list(loaded) == ["ok"] and loaded.unsupported == {"c": "C64"} and loaded.get("c") is None
    with pytest.raises(ValueError, match=r"'c'.*'C64'"):
        loaded["c"]
    with pytest.raises(KeyError):
        loaded["missing"]
    (tmp_path / "f8.safetensors").write_bytes(util.package_bytes(package, "F8_E4M3", np.arange(5, dtype=np.uint8)))
    fp8 = impl.safe_load(tmp_path / "f8.safetensors")
    with pytest.raises(ValueError, match=r"'x'.*'F8_E4M3'"):
        fp8["x"]


# ---------------------------------------------------------------- loading: laziness, sources, round trips


def test_every_dtype_round_trips_and_views_of_loaded_tensors_work(impl, tmp_path):
    arrays = {code: sample(code, (4, 3), seed=i) for i, code in enumerate(CODES)}
    impl.safe_save(tmp_path / "all.safetensors", {code: ours(impl, code, a) for code, a in arrays.items()})
    loaded = impl.safe_load(str(tmp_path / "all.safetensors"))
    for code, want in arrays.items():
        assert loaded_bits(impl, loaded[code]) == bits(want)  # (bfloat16: the uint16 patterns)
        assert loaded_bits(impl, loaded[code].shrink(((1, 3), (0, 3)))) == bits(want[1:3])


def test_safe_load_of_a_disk_buffer(impl, tmp_path):
    codes = {"w": "F32", "b": "BOOL", "h": "BF16"}
    arrays = {name: sample(code, (2, 3), seed=len(name)) for name, code in codes.items()}
    impl.safe_save(tmp_path / "f.safetensors", {n: ours(impl, codes[n], a) for n, a in arrays.items()}, {"k": "v"})
    blob = np.frombuffer((tmp_path / "f.safetensors").read_bytes(), dtype=np.uint8)
    padded = np.concatenate([np.full(5, 7, np.uint8), blob, np.full(3, 9, np.uint8)])
    whole = impl.from_numpy(padded, f"DISK:{tmp_path / 'copy.bin'}")
    source = whole.shrink(((5, 5 + blob.size),))  # a file embedded in a bigger one
    loaded = impl.safe_load(source)
    assert impl.safe_load_metadata(source) == {"k": "v"}
    assert all(loaded_bits(impl, loaded[name]) == bits(want) for name, want in arrays.items())
    with pytest.raises(TypeError, match="uint8"):
        impl.safe_load(impl.from_numpy(np.zeros(4, np.float32), f"DISK:{tmp_path / 'f32.bin'}"))
    with pytest.raises(ValueError, match="DISK"):
        impl.safe_load(impl.from_numpy(blob, "CLANG"))
    with pytest.raises(TypeError, match="path"):
        impl.safe_load(42)


def test_loaded_tensors_keep_reading_their_file_after_the_path_is_replaced(impl, tmp_path):
    path = tmp_path / "ckpt.safetensors"
    impl.safe_save(path, {"w": impl.from_numpy(np.arange(6, dtype=np.int32), "CLANG")}, {"step": "1"})
    old = impl.safe_load(path)
    new = {"w": impl.from_numpy(np.full(2, 7, np.int64), "CLANG"), "b": impl.from_numpy(np.ones(3, np.uint8), "CLANG")}
    impl.safe_save(path, new, {"step": "2"})  # a shorter file, other offsets: old's header no longer fits it
    written = path.read_bytes()
    assert impl.to_numpy(old["w"]).tolist() == list(range(6))
    assert impl.to_numpy(impl.safe_load(path)["w"]).tolist() == [7, 7]
    assert impl.safe_load_metadata(path) == {"step": "2"}
    assert path.read_bytes() == written  # reading the old tensors did not touch the new file


def test_metadata_absent_is_empty(impl, tmp_path):
    raw_file(tmp_path / "f", {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x02")
    assert impl.safe_load_metadata(tmp_path / "f") == {}
    assert impl.to_numpy(impl.safe_load(tmp_path / "f")["a"]).tolist() == [1, 2]


def test_sharded_and_computed_tensors_are_saved(impl, tmp_path):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    sharded = impl.MultiLazyBuffer.from_sharded(impl.from_numpy(x, "CLANG"), ("CLANG:0", "CLANG:1", "CLANG:2"), 0)
    computed = impl.from_numpy(x, "CLANG").e(impl.BinaryOps.ADD, impl.from_numpy(x, "CLANG"))
    impl.safe_save(tmp_path / "s.safetensors", {"sharded": sharded, "twice": computed})
    header, data = parse_oracle((tmp_path / "s.safetensors").read_bytes())
    for name, want in (("sharded", x), ("twice", 2 * x)):
        begin, end = header[name]["data_offsets"]
        assert header[name]["shape"] == [10, 3] and data[begin:end] == want.tobytes()


# ---------------------------------------------------------------- saving: atomic, durable, refusals


class BoomError(Exception):
    pass


def test_a_save_that_fails_midway_leaves_the_previous_file(impl, tmp_path):
    target = tmp_path / "ckpt.safetensors"
    impl.safe_save(target, {"a": impl.from_numpy(np.ones(3, np.float32), "CLANG")})
    before, listing = target.read_bytes(), sorted(os.listdir(tmp_path))

    def explode(out: np.ndarray) -> None:
        raise BoomError("this tensor cannot be realized")
    failing = impl.LazyBuffer.loadop(impl.LoadOps.CUSTOM, (4,), impl.dtypes.float32, "CLANG", arg=explode)
    big = impl.from_numpy(np.arange(1 << 16, dtype=np.float64), "CLANG")  # written before the failing one
    with pytest.raises(BoomError):
        impl.safe_save(target, {"big": big, "zz": failing})
    assert target.read_bytes() == before and sorted(os.listdir(tmp_path)) == listing


def test_a_read_only_target_is_a_permission_error(impl, tmp_path):
    target = tmp_path / "ro.safetensors"
    impl.safe_save(target, {"a": impl.from_numpy(np.ones(3, np.int32), "CLANG")})
    before = target.read_bytes()
    target.chmod(stat.S_IRUSR | stat.S_IRGRP)
    try:
        with pytest.raises(PermissionError, match="read-only"):
            impl.safe_save(target, {"a": impl.from_numpy(np.zeros(3, np.int32), "CLANG")})
        assert target.read_bytes() == before and os.listdir(tmp_path) == ["ro.safetensors"]
        assert impl.to_numpy(impl.safe_load(target)["a"]).tolist() == [1, 1, 1]  # a read-only file still loads
    finally:
        target.chmod(stat.S_IRUSR | stat.S_IWUSR)


@pytest.mark.parametrize(("tensors", "metadata", "error", "match"), [
    ({"__metadata__": "u8"}, None, ValueError, "reserved"),
    ({"a": np.zeros(2)}, None, TypeError, "not a LazyBuffer"),
    ({1: "u8"}, None, TypeError, "not a string"),
    ({"a": "u8"}, {"k": 1}, TypeError, "metadata"),
    ({"a": "u8"}, ["k"], TypeError, "metadata"),
    ([("a", "u8")], None, TypeError, "dict"),
])
def test_bad_save_arguments_write_nothing(impl, tmp_path, tensors, metadata, error, match):
    def value(v: Any) -> Any:
        return impl.from_numpy(np.zeros(2, np.uint8), "CLANG") if isinstance(v, str) else v
    given = [(k, value(v)) for k, v in tensors] if isinstance(tensors, list) else \
        {k: value(v) for k, v in tensors.items()}
    with pytest.raises(error, match=match):
        impl.safe_save(tmp_path / "x.safetensors", given, metadata)
    assert os.listdir(tmp_path) == []
