"""Shared fixtures: ``impl`` is the package under test (value tests run once per implementation)."""
from __future__ import annotations

import importlib
from types import ModuleType

import pytest


@pytest.fixture(scope="session", params=["reference", "fast"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """The implementation package (``reference``; the lead adds ``fast``)."""
    return importlib.import_module(request.param)
