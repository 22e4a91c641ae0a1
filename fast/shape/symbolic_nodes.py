"""Symbolic integer expressions: the node classes (raw constructors) and the int-or-node helpers.

Invariants:
- Every node is immutable and hashable; equality is structural (``NumNode(3) == 3`` holds).
- ``node.min <= value <= node.max`` for every assignment of its variables inside their ranges (that
  gives every divisor a positive value: a symbolic divisor may be 0, a size that is 0 in some binding,
  and is then never evaluated).
- The classes here build exactly the node asked for; the operators (``+ - * // % <``) and
  ``substitute`` simplify through ``SIMPLIFY``, a table of the simplifying constructors that
  fast/shape/simplify.py (which builds through these classes) fills when it is imported. Import the
  package's names from fast/shape/symbolic.py, which imports both, never this module alone.
- Division and modulo follow Python's floor semantics, including for negative values.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


class Simplifier:
    """The simplifying constructors the operators call, keyed by name: fast/shape/simplify.py sets each
    entry beside its definition when it is imported (fast/shape/symbolic.py imports it), before any
    operator runs. The table keeps the imports one-way: simplify.py imports this module, not back."""

    __slots__ = ("sym_sum", "sym_and", "mul", "floordiv", "mod", "lt")
    sym_sum: Callable[[Iterable[Node | int]], Node]
    sym_and: Callable[[Iterable[Node | int]], Node]
    mul: Callable[[Node, Node | int], Node]
    floordiv: Callable[[Node, Node | int], Node]
    mod: Callable[[Node, Node | int], Node]
    lt: Callable[[Node, Node | int], Node]


SIMPLIFY = Simplifier()


class Node:
    """Base of all symbolic expressions; ``min``/``max`` are inclusive integer bounds."""

    min: int
    max: int

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def _render(self) -> str:
        raise NotImplementedError

    @functools.cached_property
    def _hash(self) -> int:
        return hash((type(self).__name__, self._key()))

    @functools.cached_property
    def _text(self) -> str:
        return self._render()

    def __hash__(self) -> int:
        return self._hash

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the cached hash and text: str hashes differ between processes
        (PYTHONHASHSEED), so a hash cached in one would break dict lookups in another."""
        return {key: value for key, value in self.__dict__.items() if key not in ("_hash", "_text")}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return isinstance(self, NumNode) and self.b == other
        if not isinstance(other, Node):
            return NotImplemented
        same_type = type(self) is type(other) and hash(self) == hash(other)
        return self is other or (same_type and self._key() == other._key())

    def render(self) -> str:
        """A readable, Python-like rendering of the expression."""
        return self._text

    def vars(self) -> set[Variable]:
        """Every Variable that occurs in this expression."""
        return set()

    def substitute(self, mapping: Mapping[Variable, Node | int]) -> Node:
        """Replace variables by expressions (re-simplifying on the way)."""
        return self

    def evaluate(self, env: Mapping[str, int]) -> int:
        """Concrete value with variables taken from ``env`` (bound variables fall back to their value)."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"<{self.render()} [{self.min}, {self.max}]>"

    def __add__(self, other: Node | int) -> Node:
        return SIMPLIFY.sym_sum([self, other])

    def __radd__(self, other: int) -> Node:
        return SIMPLIFY.sym_sum([other, self])

    def __neg__(self) -> Node:
        return SIMPLIFY.mul(self, -1)

    def __sub__(self, other: Node | int) -> Node:
        return SIMPLIFY.sym_sum([self, -as_node(other)])

    def __rsub__(self, other: int) -> Node:
        return SIMPLIFY.sym_sum([other, -self])

    def __mul__(self, other: Node | int) -> Node:
        return SIMPLIFY.mul(self, other)

    def __rmul__(self, other: int) -> Node:
        return SIMPLIFY.mul(self, other)

    def __floordiv__(self, other: Node | int) -> Node:
        return SIMPLIFY.floordiv(self, other)

    def __mod__(self, other: Node | int) -> Node:
        return SIMPLIFY.mod(self, other)

    def __lt__(self, other: Node | int) -> Node:
        return SIMPLIFY.lt(self, other)

    def __le__(self, other: Node | int) -> Node:
        return SIMPLIFY.lt(self, as_node(other) + 1)

    def __gt__(self, other: Node | int) -> Node:
        return SIMPLIFY.lt(as_node(other), self)

    def __ge__(self, other: Node | int) -> Node:
        return SIMPLIFY.lt(as_node(other) - 1, self)

    def __and__(self, other: Node | int) -> Node:
        return SIMPLIFY.sym_and([self, other])


class NumNode(Node):
    """An integer constant ``b``."""

    def __init__(self, b: int) -> None:
        if not isinstance(b, int):
            raise TypeError(f"NumNode: expected an int, got {b!r}")
        self.b, self.min, self.max = int(b), int(b), int(b)

    def _key(self) -> tuple[object, ...]:
        return (self.b,)

    def __hash__(self) -> int:
        return hash(self.b)

    def _render(self) -> str:
        return str(self.b)

    def evaluate(self, env: Mapping[str, int]) -> int:
        return self.b


class Variable(Node):
    """A named integer in ``[min, max]``; bound copies hold a value (``_val``, None when unbound), read as
    ``val`` (ValueError when unbound, as in ``reference``). Identity ignores the value."""

    def __init__(self, expr: str, min: int, max: int, *, val: int | None = None) -> None:
        if not isinstance(expr, str) or not expr:
            raise TypeError(f"Variable: name must be a non-empty str, got {expr!r}")
        if not isinstance(min, int) or not isinstance(max, int) or min > max:
            raise ValueError(f"Variable {expr}: invalid bounds [{min!r}, {max!r}]")
        if val is not None and not min <= val <= max:
            raise ValueError(f"Variable {expr}: value {val} outside [{min}, {max}]")
        self.expr, self.min, self.max, self._val = expr, min, max, val

    def _key(self) -> tuple[object, ...]:
        return (self.expr, self.min, self.max)

    @property
    def val(self) -> int:
        """The bound value; ValueError naming the variable when it is unbound."""
        if self._val is None:
            raise ValueError(f"Variable {self.expr!r} is not bound (bind it first: .bind(value))")
        return self._val

    def bind(self, val: int) -> Variable:
        """A copy bound to ``val`` (which must lie in the variable's range)."""
        if not isinstance(val, int):
            raise TypeError(f"Variable.bind {self.expr}: expected an int, got {val!r}")
        if self._val is not None and self._val != val:
            raise ValueError(f"Variable.bind {self.expr}: already bound to {self._val}, cannot bind {val}")
        return Variable(self.expr, self.min, self.max, val=val)

    def unbind(self) -> tuple[Variable, int]:
        """Split a bound variable into its unbound copy and its value."""
        if self._val is None:
            raise ValueError(f"Variable.unbind {self.expr}: variable is not bound")
        return Variable(self.expr, self.min, self.max), self._val

    def vars(self) -> set[Variable]:
        return {self}

    def substitute(self, mapping: Mapping[Variable, Node | int]) -> Node:
        return as_node(mapping[self]) if self in mapping else self

    def _render(self) -> str:
        return self.expr

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.expr in env:
            return env[self.expr]
        if self._val is None:
            raise ValueError(f"evaluate: no value for variable {self.expr}")
        return self._val


def _less(a: Any, b: Any) -> Any:
    """``a < b`` as 0/1 for ints, symbolically for Nodes."""
    return int(a < b) if isinstance(a, int) and isinstance(b, int) else as_node(a) < b


class _BinaryNode(Node):
    """``a OP b`` with ``b`` an int or a Node; ``function`` computes OP on ints and (simplifying) on Nodes."""

    symbol = "?"
    function: Callable[[Any, Any], Any] = staticmethod(operator.add)

    def __init__(self, a: Node, b: Node | int) -> None:
        self.a, self.b = a, b
        self.min, self.max = self._bounds()

    def _bounds(self) -> tuple[int, int]:
        raise NotImplementedError

    def _b_bounds(self) -> tuple[int, int]:
        return (self.b, self.b) if isinstance(self.b, int) else (self.b.min, self.b.max)

    def _key(self) -> tuple[object, ...]:
        return (self.a, self.b)

    def vars(self) -> set[Variable]:
        return self.a.vars() | (self.b.vars() if isinstance(self.b, Node) else set())

    def substitute(self, mapping: Mapping[Variable, Node | int]) -> Node:
        b = self.b.substitute(mapping) if isinstance(self.b, Node) else self.b
        return as_node(type(self).function(self.a.substitute(mapping), b))

    def _render(self) -> str:
        return f"({self.a.render()}{self.symbol}{self.b.render() if isinstance(self.b, Node) else self.b})"

    def evaluate(self, env: Mapping[str, int]) -> int:
        b = self.b.evaluate(env) if isinstance(self.b, Node) else self.b
        return int(type(self).function(self.a.evaluate(env), b))


class MulNode(_BinaryNode):
    """``a * b``."""

    symbol, function = "*", staticmethod(operator.mul)

    def _bounds(self) -> tuple[int, int]:
        corners = [x * y for x in (self.a.min, self.a.max) for y in self._b_bounds()]
        return min(corners), max(corners)


def _divisor_bounds(node: _BinaryNode, op: str) -> tuple[int, int]:
    """Bounds of a divisor, which must be positive; a Node that may also be 0 (a size that is 0 in
    some binding, where nothing is evaluated) counts as at least 1."""
    low, high = node._b_bounds()
    if low < 0 or high <= 0:
        raise ValueError(f"{op}: divisor must be positive, got {node.a!r} {node.symbol} {node.b!r}")
    return max(low, 1), high


class DivNode(_BinaryNode):
    """``a // b`` (floor division); ``b`` is a positive int or a Node with non-negative bounds and a
    positive maximum (evaluated only where it is positive)."""

    symbol, function = "//", staticmethod(operator.floordiv)

    def _bounds(self) -> tuple[int, int]:
        low, high = _divisor_bounds(self, "DivNode")
        # floor(a / b) is monotone in a and (for b > 0) in b, so the extremes sit at corners
        return min(self.a.min // low, self.a.min // high), max(self.a.max // low, self.a.max // high)


class ModNode(_BinaryNode):
    """``a % b`` (Python modulo, so in ``[0, b)``); ``b`` as for DivNode."""

    symbol, function = "%", staticmethod(operator.mod)

    def _bounds(self) -> tuple[int, int]:
        low, high = _divisor_bounds(self, "ModNode")
        if low == high and self.a.min // low == self.a.max // low:
            return self.a.min % low, self.a.max % low
        return 0, min(high - 1, self.a.max) if self.a.min >= 0 else high - 1


class LtNode(_BinaryNode):
    """``1 if a < b else 0``."""

    symbol, function = "<", staticmethod(_less)

    def _bounds(self) -> tuple[int, int]:
        low, high = self._b_bounds()
        return (1, 1) if self.a.max < low else (0, 0) if self.a.min >= high else (0, 1)


class _NaryNode(Node):
    """A node over a tuple of child nodes."""

    joiner = "?"

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.min, self.max = self._bounds()

    def _bounds(self) -> tuple[int, int]:
        raise NotImplementedError

    def _key(self) -> tuple[object, ...]:
        return self.nodes

    def vars(self) -> set[Variable]:
        return set().union(*(node.vars() for node in self.nodes))

    def _render(self) -> str:
        return "(" + self.joiner.join(node.render() for node in self.nodes) + ")"


class SumNode(_NaryNode):
    """The sum of its nodes."""

    joiner = "+"

    def _bounds(self) -> tuple[int, int]:
        return sum(node.min for node in self.nodes), sum(node.max for node in self.nodes)

    def substitute(self, mapping: Mapping[Variable, Node | int]) -> Node:
        return SIMPLIFY.sym_sum([node.substitute(mapping) for node in self.nodes])

    def evaluate(self, env: Mapping[str, int]) -> int:
        return sum(node.evaluate(env) for node in self.nodes)


class AndNode(_NaryNode):
    """``1`` when every node is nonzero, else ``0``."""

    joiner = " and "

    def _bounds(self) -> tuple[int, int]:
        if any(node.min == node.max == 0 for node in self.nodes):
            return 0, 0
        return (1, 1) if all(node.min > 0 or node.max < 0 for node in self.nodes) else (0, 1)

    def substitute(self, mapping: Mapping[Variable, Node | int]) -> Node:
        return SIMPLIFY.sym_and([node.substitute(mapping) for node in self.nodes])

    def evaluate(self, env: Mapping[str, int]) -> int:
        return int(all(node.evaluate(env) != 0 for node in self.nodes))


sint = int | Node


_INT_ONLY = frozenset({int})


def all_int(values: Iterable[object]) -> bool:
    """True when every value is a plain int (exactly ``int``: no bools, no Nodes). One C-level pass,
    the fast-path test of the non-symbolic case."""
    return _INT_ONLY.issuperset(map(type, values))


def as_node(value: Node | int) -> Node:
    """Wrap an int as a NumNode; Nodes pass through."""
    if isinstance(value, Node):
        return value
    if isinstance(value, int):
        return NumNode(value)
    raise TypeError(f"symbolic: expected an int or Node, got {value!r}")


def as_sint(value: Node | int) -> sint:
    """Unwrap a NumNode to an int; other values pass through."""
    return value.b if type(value) is NumNode else value


def is_sint(value: object) -> bool:
    """True for ints (not bools) and Nodes."""
    if type(value) is int:
        return True
    return isinstance(value, Node) or (isinstance(value, int) and not isinstance(value, bool))
