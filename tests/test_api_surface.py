"""What a new user meets first (issue 31): both packages export the same core names, the names only
`fast` has are the ones docs/api.md marks as such, `Variable.val` raises when unbound in both, and an op
enum or dtype of the other package is refused with a message naming the package it belongs to."""
from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import fast
import reference

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"
FAST_ONLY = {"Captured", "Device", "Kernel", "compile", "debug", "jit", "schedule", "xp"}
PACKAGES = (fast, reference)


def _documented_names() -> dict[str, bool]:
    """Top-level names of api.md's "Top level" table -> whether the row is marked `fast` only."""
    section = API_MD.read_text().split("## Top level", 1)[1].split("\n## ", 1)[0]
    names: dict[str, bool] = {}
    for row in re.findall(r"^\| (.+?) \| (.+) \|$", section, flags=re.M):
        for name in re.findall(r"`([A-Za-z_.]+)", row[0]):
            names[name.split(".")[-1] if name.startswith("fast.") else name] = row[1].startswith("**fast only")
    return names


def test_core_names_are_the_same_and_fast_only_names_are_listed():
    assert set(reference.__all__) == set(fast.__all__) - FAST_ONLY
    for package in PACKAGES:
        assert all(hasattr(package, name) for name in package.__all__), package.__name__


def test_api_md_documents_every_name_and_marks_the_fast_only_ones():
    documented = _documented_names()
    assert set(fast.__all__) <= set(documented), sorted(set(fast.__all__) - set(documented))
    assert {name for name in fast.__all__ if documented[name]} == FAST_ONLY


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_unbound_variable_val_raises_value_error(package: ModuleType):
    n = package.Variable("n", 1, 4)
    with pytest.raises(ValueError, match=r"Variable 'n' is not bound"):
        _ = n.val
    assert n.bind(3).val == 3 and n.bind(3).unbind()[1] == 3


def _foreign_cases(package: ModuleType, other: ModuleType) -> list[tuple[str, object]]:
    """(what the message must name, a call mixing `other`'s enum or dtype into `package`)."""
    a = package.from_numpy(np.ones((2, 3), np.float32), "CLANG")
    multi = package.MultiLazyBuffer.from_sharded(a, ("CLANG", "CLANG:1"), 0)
    return [("ReduceOps.MAX", lambda: a.r(other.ReduceOps.MAX, (0,))),
            ("ReduceOps.SUM", lambda: multi.r(other.ReduceOps.SUM, (0,))),
            ("BinaryOps.ADD", lambda: a.e(other.BinaryOps.ADD, a)),
            ("UnaryOps.NEG", lambda: a.e(other.UnaryOps.NEG)),
            ("TernaryOps.WHERE", lambda: a.e(other.TernaryOps.WHERE, a, a)),
            ("LoadOps.CONST", lambda: package.LazyBuffer.loadop(other.LoadOps.CONST, (2,), package.dtypes.float32,
                                                                 "CLANG", arg=1.0)),
            ("dtypes.int32", lambda: a.cast(other.dtypes.int32)),
            ("dtypes.float32", lambda: package.LazyBuffer.loadop(package.LoadOps.CONST, (2,), other.dtypes.float32,
                                                                  "CLANG", arg=1.0))]


@pytest.mark.parametrize("package,other", [(fast, reference), (reference, fast)], ids=["fast", "reference"])
def test_an_enum_or_dtype_of_the_other_package_is_named_with_its_package(package: ModuleType, other: ModuleType):
    for name, call in _foreign_cases(package, other):
        with pytest.raises(TypeError) as caught:
            call()  # type: ignore[operator]
        message = str(caught.value)
        assert f"{name} belongs to package '{other.__name__}', not '{package.__name__}'" in message, message
        assert f"use {package.__name__}.{name}" in message, message


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_a_wrong_kind_of_op_of_the_own_package_keeps_the_plain_message(package: ModuleType):
    a = package.from_numpy(np.ones((2, 3), np.float32), "CLANG")
    with pytest.raises(TypeError, match=r"^r: <BinaryOps.ADD: 1> is not a ReduceOps member$"):
        a.r(package.BinaryOps.ADD, (0,))
