"""Every function `fast.xp` exports is exercised by a test against numpy (a guard for later exports:
a new function without a test fails here, naming itself)."""
from __future__ import annotations

import re
from pathlib import Path

from fast import xp

HERE = Path(__file__).parent
AGAINST_NUMPY = ("test_xp_functions.py", "test_xp_elementwise.py", "test_xp_compat.py", "test_xp_sharded.py")
NOT_ARRAY_FUNCTIONS = {"reference_namespace",  # returns the namespace itself: tests/xp/conftest.py uses it
                       "jit"}  # captures a function: tested against the uncaptured one in tests/fast/test_jit.py


def test_every_exported_function_has_a_numpy_test() -> None:
    source = "\n".join((HERE / name).read_text() for name in AGAINST_NUMPY)
    source += (HERE / "conftest.py").read_text()
    exported = sorted(name for name in dir(xp) if not name.startswith("_") and callable(getattr(xp, name))
                      and not isinstance(getattr(xp, name), type))
    untested = [name for name in exported if name not in NOT_ARRAY_FUNCTIONS
                and not re.search(rf"\b{re.escape(name)}\b", source)]
    assert len(exported) > 100
    assert not untested, f"exported by fast.xp without a test against numpy: {untested}"
