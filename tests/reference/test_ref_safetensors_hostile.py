"""safetensors (issue 10): hostile and broken files are ValueErrors saying why, for `reference` and
`fast` alike (the ``impl`` fixture), each case a test; and a hypothesis test that mutates valid files
(header bytes, the header length, offsets, shapes, dtypes, the file's end) and checks that every
result is either a correct load (each tensor what its header entry says, by the oracle of
safetensors_util.py) or a ValueError."""
from __future__ import annotations

import json
import os
import re
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors_util import CODES, LIMIT, NAMES, NUMPY_CODES, SIZES, bits, loaded_bits, parse_oracle, raw_file

# ---------------------------------------------------------------- hostile and broken files


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "I16", "shape": [3], "data_offsets": [8, 14]}}
DATA = bytes(range(14))


def changed(name: str, **fields: Any) -> dict[str, Any]:
    header = json.loads(json.dumps(GOOD))
    header[name].update(fields)
    return header


HOSTILE: dict[str, tuple[Any, bytes, int | None, str]] = {  # case: (header, data, length, what the error says)
    "shorter than the length field": (b"", b"", None, "header length"),
    "length past the end": (b"{}", b"", 1000, "runs past the end"),
    "length 2**64-1": (b"{}", b"", 2**64 - 1, "exceeds the limit"),
    "length just over the cap": (b"{}", b"", LIMIT + 1, "exceeds the limit"),
    "invalid UTF-8": (b'{"\xff\xfe": 1}', b"", None, "UTF-8"),
    "truncated JSON": (b'{"a": {"dtype": ', b"", None, "not valid JSON"),
    "NaN in JSON": (b'{"a": NaN}', b"", None, "NaN"),
    "nested very deeply": (b"[" * 100_000, b"", None, "not valid JSON"),
    "not an object": (b"[1, 2]", b"", None, "not an object"),
    "empty header": (b"", b"", 0, "not valid JSON"),
    "begin after end": (changed("a", data_offsets=[8, 0]), DATA, None, "out of order"),
    "negative begin": (changed("a", data_offsets=[-8, 0]), DATA, None, "out of order"),
    "overlapping": (changed("b", data_offsets=[6, 12]), DATA, None, "overlaps"),
    "outside the data section": (changed("b", data_offsets=[8, 14]), DATA[:12], None, "outside the data section"),
    "a gap": (changed("b", data_offsets=[10, 16]), DATA + b"..", None, "tile the data section"),
    "trailing bytes": (GOOD, DATA + b"extra", None, "tile the data section"),
    "no tensor but data": ({}, b"x", None, "tile the data section"),
    "shape x dtype != bytes": (changed("a", shape=[3]), DATA, None, "does not match"),
    "dtype x shape != bytes": (changed("b", dtype="I32"), DATA, None, "does not match"),
    "negative dim": (changed("a", shape=[-2]), DATA, None, "non-negative integers"),
    "float dim": (changed("a", shape=[2.0]), DATA, None, "non-negative integers"),
    "string dim": (changed("a", shape=["2"]), DATA, None, "non-negative integers"),
    "bool dim": (changed("a", shape=[True, 2]), DATA, None, "non-negative integers"),
    "shape not a list": (changed("a", shape=2), DATA, None, "non-negative integers"),
    "33 dims": (changed("a", shape=[1] * 32 + [2]), DATA, None, "at most 32"),
    "one offset": (changed("a", data_offsets=[0]), DATA, None, "two integers"),
    "float offset": (changed("a", data_offsets=[0, 8.0]), DATA, None, "two integers"),
    "bool offset": (changed("a", data_offsets=[False, 8]), DATA, None, "two integers"),
    "duplicate tensor name": (b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                              b'"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}', b"xy", None,
                              "duplicate key 'a'"),
    "duplicate field": (b'{"a": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}', b"x", None,
                        "duplicate key 'dtype'"),
    "missing field": ({"a": {"dtype": "U8", "shape": [1]}}, b"x", None, "the fields"),
    "tensor not an object": ({"a": [0, 1]}, b"x", None, "the fields"),
    "dtype not a string": (changed("a", dtype=4), DATA, None, "not a string"),
    "metadata of numbers": ({**GOOD, "__metadata__": {"k": 1}}, DATA, None, "__metadata__"),
    "metadata a string": ({**GOOD, "__metadata__": "k"}, DATA, None, "__metadata__"),
    "a megabyte-long name": ({"n" * 1_000_000: [1]}, b"", None, "the fields"),
    "shape nested 500 deep": (b'{"a": {"dtype": "U8", "shape": ' + b"[" * 500 + b"]" * 500 +
                              b', "data_offsets": [0, 0]}}', b"", None, "non-negative integers"),
    "offset with 5000 digits": (b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, ' + b"9" * 5000 + b"]}}",
                                b"x", None, "not valid JSON|outside the data section"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_files_are_value_errors_with_the_reason(impl, tmp_path, case):
    header, data, length, reason = HOSTILE[case]
    path = tmp_path / "bad.safetensors"
    if case == "shorter than the length field":
        path.write_bytes(b"\x01\x02\x03")
    else:
        raw_file(path, header, data, length)
    before = path.read_bytes()
    for attempt in (impl.safe_load, impl.safe_load_metadata):
        with pytest.raises(ValueError, match=reason) as caught:
            attempt(path)
        assert str(caught.value).startswith("safe_load: ") and len(str(caught.value)) < 400  # values quoted short
    assert path.read_bytes() == before


def test_header_cap_holds_inside_a_large_file(impl, tmp_path):
    path = raw_file(tmp_path / "sparse.safetensors", b"{}", length=LIMIT + 1)
    with open(path, "r+b") as handle:
        handle.truncate(LIMIT + 100)  # sparse: the length is inside the file, still above the cap
    with pytest.raises(ValueError, match="exceeds the limit"):
        impl.safe_load(path)


def test_valid_edge_files_load(impl, tmp_path):
    empty = raw_file(tmp_path / "empty", b"{}")
    assert dict(impl.safe_load(empty)) == {} and impl.safe_load_metadata(empty) == {}
    spaced = raw_file(tmp_path / "spaced", b'  {"z": {"dtype": "U8", "shape": [0, 5], "data_offsets": [0, 0]}}   ')
    tensor = impl.safe_load(spaced)["z"]
    assert tensor.shape == (0, 5) and impl.to_numpy(tensor).shape == (0, 5)
    unaligned = raw_file(tmp_path / "unaligned", {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                                  "f": {"dtype": "F64", "shape": [1], "data_offsets": [1, 9]}},
                         b"\x05" + np.array([2.5]).tobytes())
    assert impl.to_numpy(impl.safe_load(unaligned)["f"]).tolist() == [2.5]
    extra = raw_file(tmp_path / "extra", changed("a", strides=[1], note={"x": None}), DATA)  # other fields: ignored
    assert impl.to_numpy(impl.safe_load(extra)["b"]).tolist() == np.frombuffer(DATA[8:], np.int16).tolist()


# ---------------------------------------------------------------- hypothesis: mutated valid files


@st.composite
def valid_files(draw: Any) -> bytes:
    count = draw(st.integers(1, 4))
    names = draw(st.lists(st.text("abcxyz_.", min_size=1, max_size=4), min_size=count, max_size=count, unique=True))
    header: dict[str, Any] = {"__metadata__": {"k": draw(st.text("ab 1", max_size=3))}} if draw(st.booleans()) else {}
    data, position = b"", 0
    for name in names:
        code = draw(st.sampled_from([*CODES, "F8_E4M3"]))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        nbytes = int(np.prod(shape)) * SIZES[code]
        data += bytes(draw(st.lists(st.sampled_from([0, 1]) if code == "BOOL" else st.integers(0, 255),
                                    min_size=nbytes, max_size=nbytes)))
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [position, position + nbytes]}
        position += nbytes
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def mutate_header(draw: Any, blob: bytes) -> bytes:
    """One change to a valid file's header entries: dims swapped, a dtype of the same size (maybe one the
    project lacks, or BOOL over bytes other than 0 and 1), or an offset or a dim moved by a few."""
    header, data = parse_oracle(blob)
    names = sorted(n for n in header if n != "__metadata__")
    entry = header[draw(st.sampled_from(names))]
    kind = draw(st.sampled_from(["swap dims", "same-size dtype", "number"]))
    if kind == "swap dims":
        entry["shape"] = list(draw(st.permutations(entry["shape"])))
    elif kind == "same-size dtype":
        entry["dtype"] = draw(st.sampled_from(sorted(c for c in SIZES if SIZES[c] == SIZES[entry["dtype"]])))
    else:
        field = draw(st.sampled_from(["data_offsets", "shape"]))
        if entry[field]:
            entry[field][draw(st.integers(0, len(entry[field]) - 1))] += draw(st.integers(-9, 9))
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def mutate_bytes(draw: Any, blob: bytes) -> bytes:
    """One change to the raw file: the header length, a header byte, a truncation or appended bytes."""
    kind = draw(st.sampled_from(["length", "byte", "truncate", "append"]) if len(blob) > 8 else st.just("append"))
    if kind == "append":
        return blob + bytes(draw(st.lists(st.integers(0, 255), min_size=1, max_size=9)))
    if kind == "truncate":
        return blob[:draw(st.integers(0, len(blob) - 1))]
    (length,) = struct.unpack("<Q", blob[:8])
    if kind == "length":
        new = draw(st.one_of(st.integers(0, length + 16), st.sampled_from([2**64 - 1, 2**63, LIMIT, LIMIT + 1])))
        return struct.pack("<Q", new) + blob[8:]
    at = draw(st.integers(8, min(len(blob), 8 + length + 4) - 1))  # the header, or just past it
    value = draw(st.one_of(st.sampled_from(list(b'0123456789-.,:[]{}" eE\\')), st.integers(0, 255)))
    return blob[:at] + bytes([value]) + blob[at + 1:]


@st.composite
def mutated_files(draw: Any) -> bytes:
    """A valid file, then 0-2 header changes (the result re-serialized), then 0-2 raw byte changes (at least
    one change in all)."""
    blob = draw(valid_files())
    header_changes = draw(st.integers(0, 2))
    for _ in range(header_changes):
        blob = mutate_header(draw, blob)
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]) if header_changes else st.integers(1, 2))):
        blob = mutate_bytes(draw, blob)
    return blob


def check_correct_load(impl: Any, loaded: Any, blob: bytes) -> None:
    """The oracle for a file that loaded: every tensor is what its header entry says."""
    header, data = parse_oracle(blob)
    header.pop("__metadata__", None)
    assert set(loaded) | set(loaded.unsupported) == set(header) and not set(loaded) & set(loaded.unsupported)
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if entry["dtype"] not in NAMES:
            with pytest.raises(ValueError, match=re.escape(entry["dtype"])):
                loaded[name]
            continue
        tensor = loaded[name]
        assert tensor.shape == tuple(entry["shape"]) and tensor.dtype == getattr(impl.dtypes, NAMES[entry["dtype"]])
        want = np.frombuffer(data[begin:end], np.uint16 if entry["dtype"] == "BF16" else NUMPY_CODES[entry["dtype"]])
        assert loaded_bits(impl, tensor) == bits(want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=mutated_files())
def test_mutated_files_load_correctly_or_raise_value_error(impl, tmp_path, blob):
    path = tmp_path / f"mutant{len(os.listdir(tmp_path))}.safetensors"  # a new file per example
    path.write_bytes(blob)
    try:
        loaded = impl.safe_load(path)
    except ValueError as error:
        assert str(error).startswith("safe_load: ")
        return
    check_correct_load(impl, loaded, blob)
