"""Assembling a namespace module from the function groups, for any backend.

`namespace_for(backend_module)` returns a module object whose attributes are the Array API
functions (bound methods of one `Namespace` object), the dtypes (the backend's own DType objects),
the constants and a `linalg` sub-namespace. One namespace per backend (cached): arrays compare
`x.__array_namespace__() is namespace_for(backend)`. Arrays of two namespaces never mix (TypeError).
Every function (and `Array` indexing) carries the sharding guard of fast/xp/_shard.py; the
extensions (`shard`) are exported next to the standard's names.
"""
from __future__ import annotations

import math
import sys
from types import ModuleType

from fast.xp._array import Array, Sharding
from fast.xp._backend import DTYPE_NAMES, Backend
from fast.xp._shard import ShardMixin, guarded
from fast.xp._tape import TAPED
from fast.xp._tape_hooks import taped

API_VERSION = "2023.12"

FUNCTIONS = (
    # creation
    "arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril triu "
    "zeros zeros_like "
    # dtype functions
    "astype can_cast finfo iinfo isdtype result_type "
    # element-wise
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_invert bitwise_left_shift bitwise_or "
    "bitwise_right_shift bitwise_xor ceil clip copysign cos cosh divide equal exp expm1 floor floor_divide "
    "greater greater_equal hypot isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp "
    "logical_and logical_not logical_or logical_xor maximum minimum multiply negative not_equal positive pow "
    "remainder round sign signbit sin sinh sqrt square subtract tan tanh trunc "
    # indexing, linear algebra, manipulation
    "take matmul matrix_transpose tensordot vecdot broadcast_arrays broadcast_to concat expand_dims flip "
    "moveaxis permute_dims repeat reshape roll squeeze stack tile unstack "
    # searching, sets, sorting, statistics, utilities
    "argmax argmin nonzero searchsorted where count_nonzero unique_all unique_counts unique_inverse "
    "unique_values argsort sort cumulative_sum max mean min prod std sum var all any"
).split()
LINALG = ("matmul", "matrix_transpose", "tensordot", "vecdot", "vector_norm", "outer")
EXTENSIONS = ("shard",)  # beyond the standard: functions of this project's own
EXTRA_DTYPES = ("float16", "bfloat16")  # beyond the standard's dtypes: an extension


class Namespace(ShardMixin):
    """Every function group over one backend."""


for _name in (*FUNCTIONS, *LINALG, *EXTENSIONS):
    _method = guarded(_name, getattr(Namespace, _name))
    setattr(Namespace, _name, taped(_name, _method) if _name in TAPED else _method)
setattr(Namespace, "_getitem", taped("_getitem", guarded("__getitem__", Namespace._getitem)))  # noqa: B010
setattr(Namespace, "_setitem", guarded("__setitem__", Namespace._setitem))  # noqa: B010


_NAMESPACES: dict[str, ModuleType] = {}


def namespace_for(backend: ModuleType, module: ModuleType | None = None) -> ModuleType:
    """The Array API namespace over `backend` (a module with the LazyBuffer API, e.g. `fast` or
    `reference`), filling `module` when given (fast/xp/__init__.py passes itself)."""
    key = backend.__name__
    if key in _NAMESPACES:
        return _NAMESPACES[key]
    module = module or ModuleType(f"fast.xp.over_{key}", f"The Array API namespace over {key}'s LazyBuffer.")
    ns = Namespace(Backend(backend), module)
    names: list[str] = []
    for name in (*FUNCTIONS, *EXTENSIONS):
        setattr(module, name, getattr(ns, name))
    names.extend((*FUNCTIONS, *EXTENSIONS))
    for name in DTYPE_NAMES:
        setattr(module, name, ns._dt(name))
    names.extend(DTYPE_NAMES)
    linalg = ModuleType(f"{module.__name__}.linalg", "The linalg extension (the functions we provide).")
    for name in LINALG:
        setattr(linalg, name, getattr(ns, name))
    linalg.__all__ = list(LINALG)  # type: ignore[attr-defined]
    constants = {"e": math.e, "pi": math.pi, "inf": math.inf, "nan": math.nan, "newaxis": None,
                 "linalg": linalg, "Array": Array, "Sharding": Sharding,
                 "__array_namespace_info__": ns.__array_namespace_info__}
    for name, value in constants.items():
        setattr(module, name, value)
    names.extend(constants)
    module.__array_api_version__ = API_VERSION  # type: ignore[attr-defined]
    module.__all__ = sorted(names)  # type: ignore[attr-defined]
    module.backend = backend  # type: ignore[attr-defined]
    if module.__name__ not in sys.modules:
        sys.modules[module.__name__] = module
    _NAMESPACES[key] = module
    return module
