"""The suite's own tables of dtypes and ops, written from docs/semantics.md.

Nothing here imports `fast` or `reference`: the suite must not inherit a bug from either side.
Dtypes and ops are named by strings (`"float16"`, `"ADD"`); drivers resolve them on a package with
`getattr(pkg.dtypes, name)` and `getattr(pkg.BinaryOps, name)`.
"""
from __future__ import annotations

from typing import Final

DTYPES: Final = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                 "float16", "bfloat16", "float32", "float64")
FLOATS: Final = frozenset({"float16", "bfloat16", "float32", "float64"})
SIGNED: Final = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED: Final = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS: Final = SIGNED | UNSIGNED
HALF: Final = frozenset({"float16", "bfloat16"})
NUMPY_DTYPES: Final = tuple(d for d in DTYPES if d != "bfloat16")  # dtypes numpy (and from_numpy) know

ITEMSIZE: Final = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
                   "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

UNARY: Final = ("NEG", "SQRT", "EXP2", "LOG2", "SIN")
BINARY: Final = ("ADD", "SUB", "MUL", "DIV", "MAX", "MOD", "CMPLT", "CMPEQ", "XOR")
TERNARY: Final = ("WHERE", "MULACC")
REDUCE: Final = ("SUM", "MAX")
ELEMENTWISE: Final = UNARY + BINARY + TERNARY
TRANSCENDENTAL: Final = frozenset({"EXP2", "LOG2", "SIN"})
COMPARE: Final = frozenset({"CMPLT", "CMPEQ"})
OP_CLASS: Final = {**{o: "UnaryOps" for o in UNARY}, **{o: "BinaryOps" for o in BINARY},
                   **{o: "TernaryOps" for o in TERNARY}}
ARITY: Final = {**{o: 1 for o in UNARY}, **{o: 2 for o in BINARY}, **{o: 3 for o in TERNARY}}
MOVEMENT: Final = ("reshape", "pad", "expand", "permute", "shrink", "stride")

# Machine epsilon (2^-mantissa bits), largest finite value, smallest normal and smallest subnormal.
EPS: Final = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
MAX_FINITE: Final = {"float16": 65504.0, "bfloat16": (2 - 2.0 ** -7) * 2.0 ** 127,
                     "float32": (2 - 2.0 ** -23) * 2.0 ** 127, "float64": 1.7976931348623157e308}
TINY: Final = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}
DENORM_MIN: Final = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149,
                     "float64": 5e-324}

_BOOL_OPS: Final = frozenset({"ADD", "MUL", "MAX", "MOD", "CMPLT", "CMPEQ", "XOR", "WHERE", "MULACC"})
_FLOAT_ONLY: Final = frozenset({"EXP2", "LOG2", "SIN", "SQRT"})
_INT_ONLY: Final = frozenset({"MOD", "XOR"})


def supports(op: str, dtype: str) -> bool:
    """Whether elementwise `op` accepts value operands of `dtype` (docs/semantics.md table)."""
    if op == "WHERE":
        return True
    if dtype == "bool":
        return op in _BOOL_OPS
    if dtype in FLOATS:
        return op not in _INT_ONLY
    return op not in _FLOAT_ONLY


def result_dtype(op: str, dtype: str) -> str:
    """The dtype an elementwise op gives for value operands of `dtype`."""
    return "bool" if op in COMPARE else dtype


def int_range(dtype: str) -> tuple[int, int]:
    """Lowest and highest value of an integer (or bool, as 0/1) dtype."""
    if dtype == "bool":
        return 0, 1
    bits = 8 * ITEMSIZE[dtype]
    if dtype in UNSIGNED:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def bitcast_partners(dtype: str) -> tuple[str, ...]:
    """Dtypes a BITCAST from `dtype` may target off DISK: same itemsize, neither bool."""
    if dtype == "bool":
        return ()
    return tuple(d for d in DTYPES if d != "bool" and ITEMSIZE[d] == ITEMSIZE[dtype])


def device_kind(device: str) -> str:
    """`CLANG:2` -> `CLANG`; `DISK:/path` -> `DISK`."""
    return device.split(":", 1)[0]


def canonical_device(device: str) -> str:
    """`X:0` and `X` name one device; the suite compares names in this form."""
    return device[:-2] if device.endswith(":0") and not device.startswith("DISK:") else device


def is_disk(device: str) -> bool:
    return device.startswith("DISK:")
