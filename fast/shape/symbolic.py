"""Symbolic integer expressions used for shapes, strides and index arithmetic.

Invariants:
- Every node is immutable and hashable; equality is structural (``NumNode(3) == 3`` holds).
- ``node.min <= value <= node.max`` for every assignment of its variables inside their ranges (that
  gives every divisor a positive value: a symbolic divisor may be 0, a size that is 0 in some binding,
  and is then never evaluated).
- The node classes are raw constructors; the operators (``+ - * // % <``), ``sym_sum`` and ``sym_and``
  simplify, so user code should build expressions through them.
- Division and modulo follow Python's floor semantics, including for negative values.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


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
        return sym_sum([self, other])

    def __radd__(self, other: int) -> Node:
        return sym_sum([other, self])

    def __neg__(self) -> Node:
        return _mul(self, -1)

    def __sub__(self, other: Node | int) -> Node:
        return sym_sum([self, -as_node(other)])

    def __rsub__(self, other: int) -> Node:
        return sym_sum([other, -self])

    def __mul__(self, other: Node | int) -> Node:
        return _mul(self, other)

    def __rmul__(self, other: int) -> Node:
        return _mul(self, other)

    def __floordiv__(self, other: Node | int) -> Node:
        return _floordiv(self, other)

    def __mod__(self, other: Node | int) -> Node:
        return _mod(self, other)

    def __lt__(self, other: Node | int) -> Node:
        return _lt(self, other)

    def __le__(self, other: Node | int) -> Node:
        return _lt(self, as_node(other) + 1)

    def __gt__(self, other: Node | int) -> Node:
        return _lt(as_node(other), self)

    def __ge__(self, other: Node | int) -> Node:
        return _lt(as_node(other) - 1, self)

    def __and__(self, other: Node | int) -> Node:
        return sym_and([self, other])


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
        return sym_sum([node.substitute(mapping) for node in self.nodes])

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
        return sym_and([node.substitute(mapping) for node in self.nodes])

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


def sint_prod(values: Iterable[sint]) -> sint:
    """Product of ints and Nodes; an int whenever the result is constant."""
    product = functools.reduce(operator.mul, values, 1)
    return product if type(product) is int else as_sint(as_node(product))


def _coefficient(node: Node) -> tuple[Node, int]:
    """Split ``node`` into ``(base, coefficient)`` with ``node == base * coefficient``."""
    if isinstance(node, MulNode) and isinstance(node.b, int):
        return node.a, node.b
    return node, 1


def _flatten(nodes: Iterable[Node | int], kind: type[_NaryNode]) -> Iterable[Node]:
    for node in nodes:
        node = as_node(node)
        if isinstance(node, kind):
            yield from node.nodes
        else:
            yield node


def sym_sum(nodes: Iterable[Node | int]) -> Node:
    """Sum with constants folded, like terms combined and terms in a canonical order."""
    constant = 0
    coefficients: dict[Node, int] = {}
    for node in _flatten(nodes, SumNode):
        if isinstance(node, NumNode):
            constant += node.b
            continue
        base, coefficient = _coefficient(node)
        coefficients[base] = coefficients.get(base, 0) + coefficient
    terms = sorted((_mul(base, c) for base, c in coefficients.items() if c != 0), key=lambda n: n.render())
    if constant != 0 or not terms:
        terms.append(NumNode(constant))
    return terms[0] if len(terms) == 1 else SumNode(terms)


def sym_and(nodes: Iterable[Node | int]) -> Node:
    """Logical and: drops constant-true terms, is 0 if any term is constant 0."""
    kept: list[Node] = []
    for node in _flatten(nodes, AndNode):
        if node.min == node.max == 0:
            return NumNode(0)
        if (node.min > 0 or node.max < 0) or node in kept:
            continue
        kept.append(node)
    if not kept:
        return NumNode(1)
    return kept[0] if len(kept) == 1 and kept[0].min >= 0 and kept[0].max <= 1 else AndNode(kept)


def _mul(node: Node, factor: Node | int) -> Node:
    if isinstance(factor, NumNode):
        factor = factor.b
    if isinstance(factor, Node):
        return _mul_nodes(node, factor)
    if factor == 0 or factor == 1:
        return NumNode(0) if factor == 0 else node
    if isinstance(node, NumNode):
        return NumNode(node.b * factor)
    if isinstance(node, MulNode) and isinstance(node.b, int):
        return _mul(node.a, node.b * factor)
    if isinstance(node, SumNode):
        return sym_sum([_mul(term, factor) for term in node.nodes])
    return MulNode(node, factor)


def _mul_nodes(left: Node, right: Node) -> Node:
    """Product of two non-constant-or-constant nodes with int coefficients kept outermost."""
    if isinstance(left, NumNode):
        return _mul(right, left.b)
    if isinstance(left, SumNode):
        return sym_sum([_mul(term, right) for term in left.nodes])
    if isinstance(right, SumNode):
        return sym_sum([_mul(left, term) for term in right.nodes])
    for first, second in ((left, right), (right, left)):
        if isinstance(first, MulNode) and isinstance(first.b, int):
            return _mul(_mul(first.a, second), first.b)
    first, second = sorted((left, right), key=lambda n: n.render())
    return MulNode(first, second)


def _divisor(op: str, node: Node, divisor: Node | int) -> Node | int:
    divisor = as_sint(divisor)
    if isinstance(divisor, int) and divisor == 0:
        raise ZeroDivisionError(f"symbolic {op}: {node.render()} {op} 0")
    return divisor


def _floordiv(node: Node, divisor_in: Node | int) -> Node:
    divisor = _divisor("//", node, divisor_in)
    if isinstance(divisor, Node):
        return _floordiv_node(node, divisor)
    if divisor < 0:
        return _floordiv(-node, -divisor)
    if divisor == 1:
        return node
    if node.min // divisor == node.max // divisor:
        return NumNode(node.min // divisor)
    if isinstance(node, DivNode) and isinstance(node.b, int):
        return _floordiv(node.a, node.b * divisor)
    if isinstance(node, MulNode) and isinstance(node.b, int):
        if node.b % divisor == 0:
            return _mul(node.a, node.b // divisor)
        if node.b > 0 and divisor % node.b == 0:
            return _floordiv(node.a, divisor // node.b)
    if isinstance(node, SumNode):
        return _floordiv_sum(node, divisor)
    return DivNode(node, divisor)


def _floordiv_sum(node: SumNode, divisor: int) -> Node:
    """``(q*divisor + r) // divisor == q + r // divisor``: move exact multiples out, then try a common factor."""
    quotient: list[Node] = []
    remainder: list[Node] = []
    for term in node.nodes:
        if isinstance(term, NumNode) and term.b // divisor != 0:
            quotient.append(NumNode(term.b // divisor))
            remainder.append(NumNode(term.b % divisor))
        elif not isinstance(term, NumNode) and _coefficient(term)[1] % divisor == 0:
            quotient.append(_floordiv(term, divisor))
        else:
            remainder.append(term)
    if quotient:
        return sym_sum(quotient) + _floordiv(sym_sum(remainder), divisor)
    common = _common_factor(node, divisor)
    if common > 1:
        return _floordiv(_divide_exact(node, common), divisor // common)
    return DivNode(node, divisor)


def _common_factor(node: SumNode, divisor: int) -> int:
    """gcd of ``divisor`` and every term's coefficient (constants count as coefficients)."""
    values = [term.b if isinstance(term, NumNode) else _coefficient(term)[1] for term in node.nodes]
    return math.gcd(divisor, *values)


def _divide_exact(node: SumNode, factor: int) -> Node:
    """``node / factor`` where every coefficient is divisible by ``factor``."""
    terms: list[Node] = []
    for term in node.nodes:
        base, coefficient = (NumNode(1), term.b) if isinstance(term, NumNode) else _coefficient(term)
        terms.append(_mul(base, coefficient // factor))
    return sym_sum(terms)


def _mod(node: Node, divisor_in: Node | int) -> Node:
    divisor = _divisor("%", node, divisor_in)
    if isinstance(divisor, Node):
        return _mod_node(node, divisor)
    if divisor < 0:
        return -_mod(-node, -divisor)
    if divisor == 1:
        return NumNode(0)
    if node.min // divisor == node.max // divisor:
        return node - (node.min // divisor) * divisor
    if isinstance(node, ModNode) and isinstance(node.b, int) and node.b % divisor == 0:
        return _mod(node.a, divisor)
    if isinstance(node, (MulNode, SumNode)):
        reduced = sym_sum([_reduce_term(term, divisor) for term in _flatten([node], SumNode)])
        if reduced != node:
            return _mod(reduced, divisor)
    if isinstance(node, SumNode) and (common := _common_factor(node, divisor)) > 1:
        return _mod(_divide_exact(node, common), divisor // common) * common
    return ModNode(node, divisor)


def _reduce_term(term: Node, divisor: int) -> Node:
    """A term congruent to ``term`` modulo ``divisor`` with its coefficient reduced into ``[0, divisor)``."""
    if isinstance(term, NumNode):
        return NumNode(term.b % divisor)
    base, coefficient = _coefficient(term)
    return _mul(base, coefficient % divisor)


def _exact_quotient(term: Node, divisor: Node) -> Node | None:
    """``term / divisor`` when ``term`` is structurally a multiple of ``divisor``, else None."""
    if term == divisor:
        return NumNode(1)
    if isinstance(term, MulNode):
        if isinstance(term.b, int):
            inner = _exact_quotient(term.a, divisor)
            return None if inner is None else inner * term.b
        if term.b == divisor or term.a == divisor:
            return term.a if term.b == divisor else term.b
    return None


def _floordiv_node(node: Node, divisor: Node) -> Node:
    if divisor.min < 0 or divisor.max <= 0:
        raise ValueError(f"symbolic //: divisor {divisor!r} must be positive")
    if node.min >= 0 and node.max < divisor.min:
        return NumNode(0)
    terms = list(node.nodes) if isinstance(node, SumNode) else [node]
    quotients = [_exact_quotient(term, divisor) for term in terms]
    moved = [q for q in quotients if q is not None]
    if moved:
        rest = sym_sum([term for term, q in zip(terms, quotients, strict=True) if q is None])
        return sym_sum(moved) + (rest // divisor if rest != 0 else 0)
    return DivNode(node, divisor)


def _mod_node(node: Node, divisor: Node) -> Node:
    if divisor.min < 0 or divisor.max <= 0:
        raise ValueError(f"symbolic %: divisor {divisor!r} must be positive")
    if node.min >= 0 and node.max < divisor.min:
        return node
    terms = list(node.nodes) if isinstance(node, SumNode) else [node]
    rest = [term for term in terms if _exact_quotient(term, divisor) is None]
    if len(rest) != len(terms):
        return sym_sum(rest) % divisor
    return ModNode(node, divisor)


def _lt(node: Node, other_in: Node | int) -> Node:
    other = as_node(other_in)
    if node.max < other.min:
        return NumNode(1)
    if node.min >= other.max:
        return NumNode(0)
    if not isinstance(other, NumNode):
        difference = node - other
        if difference.max < 0 or difference.min >= 0:
            return NumNode(int(difference.max < 0))
        return LtNode(node, other)
    bound = other.b
    if isinstance(node, MulNode) and isinstance(node.b, int) and node.b > 0:
        return _lt(node.a, -(-bound // node.b))
    if isinstance(node, SumNode):
        constant = sum(term.b for term in node.nodes if isinstance(term, NumNode))
        if constant != 0:
            return _lt(sym_sum([term for term in node.nodes if not isinstance(term, NumNode)]), bound - constant)
        common = math.gcd(*(_coefficient(term)[1] for term in node.nodes))
        if common > 1:
            return _lt(_divide_exact(node, common), -(-bound // common))
    return LtNode(node, bound)
