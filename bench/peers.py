"""The array libraries `fast` is compared with: numpy always, torch and JAX when importable.

Each peer is an `ArrayOps`: a handful of primitives (exp, sqrt, keepdims reductions, matmul, conv2d)
that the workloads' peer functions are written in, plus conversion, compilation and synchronisation,
so one function per workload serves every peer. Each peer computes in its own best way (BLAS matmul,
im2col + tensordot or the library's own conv).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

Axis = int | tuple[int, ...] | None


class ArrayOps:
    """numpy: the baseline peer, and the parent of the optional ones."""

    name = "numpy"

    def __init__(self) -> None:
        self.version = np.__version__

    def convert(self, array: np.ndarray) -> Any:
        return array

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def sync(self, value: Any) -> None:
        """Wait until `value` is computed (asynchronous libraries return early)."""

    def exp(self, x: Any) -> Any:
        return np.exp(x)

    def sqrt(self, x: Any) -> Any:
        return np.sqrt(x)

    def sum(self, x: Any, axis: Axis = None) -> Any:
        return np.sum(x, axis=axis, keepdims=True)

    def max(self, x: Any, axis: Axis = None) -> Any:
        return np.max(x, axis=axis, keepdims=True)

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def mT(self, x: Any) -> Any:  # noqa: N802  (the Array API's name)
        """x with its last two axes swapped, a view (BLAS reads it transposed, nothing is copied)."""
        return np.swapaxes(x, -1, -2)

    def take(self, table: Any, ids: Any) -> Any:
        """The rows of `table` at `ids` (axis 0)."""
        return np.take(table, ids, axis=0)

    def conv2d(self, x: Any, weight: Any, padding: int) -> Any:
        """im2col (a strided view, no copy until tensordot) + tensordot (BLAS)."""
        p = padding
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, weight.shape[2:], axis=(2, 3))
        out = np.tensordot(windows, weight, axes=((1, 4, 5), (1, 2, 3)))  # (N, OH, OW, Cout)
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


class TorchOps(ArrayOps):
    """torch on the CPU, eager mode."""

    name = "torch"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.version = torch.__version__

    def convert(self, array: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(array))

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy()

    def exp(self, x: Any) -> Any:
        return self.torch.exp(x)

    def sqrt(self, x: Any) -> Any:
        return self.torch.sqrt(x)

    def _dims(self, x: Any, axis: Axis) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(x.dim()))
        return (axis,) if isinstance(axis, int) else tuple(axis)

    def sum(self, x: Any, axis: Axis = None) -> Any:
        return self.torch.sum(x, dim=self._dims(x, axis), keepdim=True)

    def max(self, x: Any, axis: Axis = None) -> Any:
        return self.torch.amax(x, dim=self._dims(x, axis), keepdim=True)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.torch.matmul(a, b)

    def mT(self, x: Any) -> Any:  # noqa: N802
        return x.transpose(-2, -1)

    def take(self, table: Any, ids: Any) -> Any:
        return self.torch.index_select(table, 0, ids)

    def conv2d(self, x: Any, weight: Any, padding: int) -> Any:
        return self.torch.nn.functional.conv2d(x, weight, padding=padding)


class JaxOps(ArrayOps):
    """JAX on its default (CPU here) backend; each workload function is jitted."""

    name = "jax"

    def __init__(self, jax: Any) -> None:
        self.jax = jax
        self.jnp = importlib.import_module("jax.numpy")
        self.version = jax.__version__

    def convert(self, array: np.ndarray) -> Any:
        return self.jax.device_put(array)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self.jax.jit(fn)

    def sync(self, value: Any) -> None:
        value.block_until_ready()

    def exp(self, x: Any) -> Any:
        return self.jnp.exp(x)

    def sqrt(self, x: Any) -> Any:
        return self.jnp.sqrt(x)

    def sum(self, x: Any, axis: Axis = None) -> Any:
        return self.jnp.sum(x, axis=axis, keepdims=True)

    def max(self, x: Any, axis: Axis = None) -> Any:
        return self.jnp.max(x, axis=axis, keepdims=True)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.jnp.matmul(a, b)

    def mT(self, x: Any) -> Any:  # noqa: N802
        return self.jnp.swapaxes(x, -1, -2)

    def take(self, table: Any, ids: Any) -> Any:
        return self.jnp.take(table, ids, axis=0)

    def conv2d(self, x: Any, weight: Any, padding: int) -> Any:
        pads = [(padding, padding), (padding, padding)]
        return self.jax.lax.conv_general_dilated(x, weight, (1, 1), pads)


def _optional(module: str, wrap: Callable[[Any], ArrayOps]) -> ArrayOps | str:
    """The peer for `module` if it imports, else a note saying why it is skipped."""
    try:
        return wrap(importlib.import_module(module))
    except Exception as error:  # any failure to import means the peer is not available
        return f"{module} not available ({type(error).__name__}: {error}); skipped"


def load_peers(wanted: tuple[str, ...]) -> tuple[list[ArrayOps], list[str]]:
    """numpy plus whichever of the wanted optional peers ("torch", "jax") import; and skip notes."""
    makers: dict[str, Callable[[Any], ArrayOps]] = {"torch": TorchOps, "jax": JaxOps}
    peers: list[ArrayOps] = [ArrayOps()]
    notes: list[str] = []
    for name in wanted:
        if name == "numpy":
            continue
        if name not in makers:
            raise ValueError(f"unknown peer {name!r}; known: numpy, torch, jax")
        found = _optional(name, makers[name])
        if isinstance(found, str):
            notes.append(found)
        else:
            peers.append(found)
    return peers, notes
