"""The program builder: a pool of values with their static Info, drawn from by every action.

Invariants: every step added is valid for its Info (checked by `analysis.infer`, which raises on a
misuse of sharding rules, so actions test candidates with `try_add`); the pool holds only defined
values (no EMPTY before its assign, nothing retired). All randomness goes through `draw`, so
Hypothesis can replay and shrink a program. A symbolic program (strategies/symbolic.py) sets
`variables` and `bindings` first; Infos are then those of the first binding.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from hypothesis import strategies as st

from conformance.analysis import Info, infer
from conformance.layout import shard as shard_layout
from conformance.profiles import GenConfig
from conformance.program import (
    ArrayData,
    Cast,
    ConstLike,
    Elementwise,
    Fetch,
    Leaf,
    Program,
    Shape,
    Shard,
    Step,
    Var,
    bind_step,
)
from conformance.strategies.data import array_data, const_values, random_data, scalars, shapes
from conformance.vocab import canonical_device

T = TypeVar("T")
_MASK = (1 << 64) - 1


def _mix(value: int) -> float:
    """splitmix64 finaliser, scaled to [0, 1)."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) / 2.0 ** 64


class Builder:
    def __init__(self, draw: st.DrawFn, cfg: GenConfig) -> None:
        self.draw, self.cfg = draw, cfg
        self.steps: list[Step] = []
        self.infos: list[Info | None] = []
        self.pool: list[int] = []
        self.ring: int | None = None
        self.disk_tag: int | None = None
        self.disk_files = 0
        self.variables: tuple[Var, ...] = ()
        self.bindings: tuple[tuple[int, ...], ...] = ()

    # ------------------------------------------------------------ drawing helpers
    def uniform(self) -> float:
        """A uniform float in [0, 1): a drawn 64-bit integer through a mixing function.

        Hypothesis favours small and boundary integers; mixing spreads them so probabilities mean
        what they say, while a drawn 0 (where shrinking heads) still gives 0.0.
        """
        raw = self.draw(st.integers(0, _MASK))
        return 0.0 if raw == 0 else _mix(raw)

    def chance(self, p: float) -> bool:
        """True with probability p; shrinks toward False."""
        return self.uniform() >= 1.0 - p

    def choose(self, options: Sequence[T]) -> T:
        """One of `options`, uniformly; shrinks toward the first."""
        items = list(options)
        return items[min(len(items) - 1, int(self.uniform() * len(items)))]

    def integer(self, low: int, high: int) -> int:
        return low + min(high - low, int(self.uniform() * (high - low + 1)))

    # ------------------------------------------------------------ steps and the pool
    def info(self, index: int) -> Info:
        info = self.infos[index]
        assert info is not None
        return info

    def concrete(self, step: Step) -> Step:
        """`step` with the first binding's values in place of its Vars (what analysis reads)."""
        if not self.variables:
            return step
        values = dict(zip(self.variables, self.bindings[0], strict=True))
        return bind_step(step, values.__getitem__)

    def add(self, step: Step, pooled: bool = True) -> int:
        info = infer(self.concrete(step), self.infos)
        self.steps.append(step)
        self.infos.append(info)
        index = len(self.steps) - 1
        if pooled and info is not None and info.defined:
            self.pool.append(index)
        return index

    def try_add(self, step: Step, pooled: bool = True) -> int | None:
        """Add `step` if the sharding rules accept it; None (nothing added) otherwise."""
        try:
            infer(self.concrete(step), self.infos)
        except ValueError:
            return None
        return self.add(step, pooled)

    def retire(self, index: int) -> None:
        if index in self.pool:
            self.pool.remove(index)

    def candidates(self, predicate: Callable[[Info], bool]) -> list[int]:
        return [i for i in self.pool if predicate(self.info(i))]

    def pick(self, predicate: Callable[[Info], bool]) -> int | None:
        """A pool value satisfying predicate (recent ones more likely), or None."""
        found = self.candidates(predicate)
        if not found:
            return None
        recent = found[-3:]
        return self.choose(recent if self.chance(0.6) else found)

    # ------------------------------------------------------------ devices and leaves
    def device(self) -> str:
        """Mostly the first device of the first kind; sometimes another, sometimes spelled `X:0`."""
        if self.chance(0.8):
            return self.cfg.kinds[0] if not self.chance(0.1) else f"{self.cfg.kinds[0]}:0"
        return self.choose(self.cfg.single_devices())

    def disk_device(self) -> str:
        """A new DISK file name, a function of the draws only (so a replayed program is identical)."""
        assert self.cfg.disk_dir is not None
        if self.disk_tag is None:
            self.disk_tag = self.integer(0, 2 ** 40)
        self.disk_files += 1
        return f"DISK:{self.cfg.disk_dir}/p{self.disk_tag}_{self.disk_files}"

    def shape(self, **kwargs: object) -> Shape:
        return self.draw(shapes(max_elements=self.cfg.max_elements, **kwargs))  # type: ignore[arg-type]

    def leaf(self, dtype: str, shape: Shape, device: str, data: ArrayData | None = None) -> int:
        """A realized leaf of any dtype (bfloat16 through a float32 cast or a uint16 bitcast)."""
        if data is None and math.prod(shape) > 1024:
            data = self.draw(random_data(dtype, shape))
        if dtype == "bfloat16" and data is None and self.chance(0.3):
            bits = self.draw(st.lists(st.integers(0, 0xFFFF), min_size=math.prod(shape), max_size=math.prod(shape)))
            raw = self.add(Leaf(ArrayData("uint16", shape, tuple(bits)), device), pooled=False)
            return self.add(Cast(raw, "bfloat16", bitcast=True))
        data = data if data is not None else self.draw(array_data(dtype, shape))
        index = self.add(Leaf(data, device), pooled=dtype != "bfloat16")
        return self.add(Cast(index, "bfloat16")) if dtype == "bfloat16" else index

    def fresh_like(self, info: Info) -> int | None:
        """A new independent value with info's shape, dtype and place (None if none can be made)."""
        if info.layout is None:
            if info.disk:
                return None
            return self.leaf(info.dtype, info.shape, info.device)
        layout = info.layout
        try:
            natural = shard_layout(info.shape, layout.devices, layout.axis)
        except ValueError:
            return None
        if natural != layout:
            return None
        base = self.leaf(info.dtype, info.shape, layout.devices[0])
        return self.add(Shard(base, layout.devices, layout.axis))

    def const_like(self, index: int) -> int:
        value = self.draw(const_values(self.info(index).dtype))
        return self.add(ConstLike(index, value))

    def partner(self, index: int, exact: bool = False, sign_safe: bool = False, allow_self: bool = True) -> int:
        """A second operand for an op with `index`: same shape and dtype, compatible place.

        exact: it must not be approx (and not carry a signed-zero ambiguity when sign_safe).
        """
        me = self.info(index)

        def fits(other: Info) -> bool:
            if other.shape != me.shape or other.dtype != me.dtype or other.disk:
                return False
            if (exact and other.approx) or (sign_safe and other.zero_sign):
                return False
            return _places_meet(me, other)
        choice = self.choose(("self", "pool", "fresh", "const") if allow_self else ("pool", "fresh", "const"))
        if choice == "self" and fits(me):
            return index
        if choice == "pool":
            found = self.pick(fits)
            if found is not None:
                return found
        if choice in ("fresh", "pool"):
            made = self.fresh_like(me)
            if made is not None:
                return made
        return self.const_like(index)

    def bool_like(self, index: int) -> int:
        """A bool condition with the shape and place of `index`."""
        me = self.info(index)
        found = self.pick(lambda o: o.dtype == "bool" and o.shape == me.shape and _places_meet(me, o) and not o.disk)
        if found is not None and self.chance(0.5):
            return found
        if not me.approx and me.dtype != "bool" and self.chance(0.5):
            other = self.partner(index, exact=True)
            return self.add(Elementwise(self.choose(("CMPLT", "CMPEQ")), (index, other)))
        made = self.fresh_like(Info(me.shape, "bool", me.device, me.layout))
        if made is not None:
            return made
        return self.add(Cast(self.add(ConstLike(index, self.choose((0, 1)))), "bool"))

    # ------------------------------------------------------------ finishing
    def finish(self, expect: str | None = None) -> Program:
        return Program(tuple(self.steps), expect=expect, ring=self.ring, variables=self.variables,
                       bindings=self.bindings)

    def fetch_some(self) -> None:
        """Fetch the newest value and one or two others."""
        values = list(self.pool)
        if not values:
            return
        chosen = [values[-1]]
        for _ in range(self.integer(0, 2)):
            other = self.choose(values)
            if other not in chosen:
                chosen.append(other)
        for index in chosen:
            self.add(Fetch(index))

    def scalar(self, dtype: str) -> object:
        return self.draw(scalars(dtype))


def _places_meet(a: Info, b: Info) -> bool:
    """Whether two values can be operands of one elementwise op."""
    if a.layout is None or b.layout is None:
        return a.layout is None and b.layout is None and _same_device(a.device, b.device)
    if a.layout == b.layout:
        return True
    return a.layout.devices == b.layout.devices and a.layout.all_real and b.layout.all_real


def _same_device(a: str, b: str) -> bool:
    return canonical_device(a) == canonical_device(b)

