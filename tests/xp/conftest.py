"""Fixtures for the Array API front end: `ns` is (namespace, device) over fast on CLANG, fast on LLVM and
reference, so every value test runs against numpy three times."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import fast.xp
import reference


@dataclass(frozen=True)
class Target:
    """A namespace and the device its arrays are placed on."""

    xp: Any
    device: str

    def asarray(self, data: Any, **kwargs: Any) -> Any:
        return self.xp.asarray(data, device=self.device, **kwargs)


TARGETS = {"fast-CLANG": ("fast", "CLANG"), "fast-LLVM": ("fast", "LLVM"), "reference": ("reference", "CLANG")}


def namespace(backend: str) -> Any:
    """The xp namespace over `backend` ("fast" or "reference")."""
    return fast.xp if backend == "fast" else fast.xp.namespace_for(reference)


def make_target(name: str) -> Target:
    backend, device = TARGETS[name]
    return Target(namespace(backend), device)


@pytest.fixture(params=sorted(TARGETS), scope="module")
def ns(request: pytest.FixtureRequest) -> Target:
    return make_target(request.param)


def to_np(x: Any) -> np.ndarray:
    """The values of an xp array (realizes it)."""
    return np.asarray(x)
