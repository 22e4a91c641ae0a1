"""The example scripts as modules for tests (examples/ is not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def transformer() -> ModuleType:
    """examples/transformer.py, loaded once per process."""
    name = "transformer_example_for_tests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "transformer.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {EXAMPLES / 'transformer.py'}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]
