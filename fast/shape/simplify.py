"""The simplifying constructors of symbolic expressions: sums, products, floor division, modulo,
comparison and logical and, each folding constants and known bounds.

Invariants:
- Each rule returns a node equal in value to the expression asked for, for every assignment of the
  variables inside their ranges.
- Sums keep their terms in a canonical order (by rendering), products keep int coefficients outermost,
  so structurally equal inputs give equal (and equally hashed) results.
- Each rule the operators of fast/shape/symbolic_nodes.py call is entered in ``SIMPLIFY`` right below
  its definition, when this module is imported.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable

from fast.shape.symbolic_nodes import (
    SIMPLIFY,
    AndNode,
    DivNode,
    LtNode,
    ModNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    _NaryNode,
    as_node,
    as_sint,
    sint,
)


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
    whole = _whole_of_parts(coefficients)
    if whole is not None:
        return sym_sum([*(_mul(base, c) for base, c in coefficients.items() if c != 0), whole, NumNode(constant)])
    terms = sorted((_mul(base, c) for base, c in coefficients.items() if c != 0), key=lambda n: n.render())
    if constant != 0 or not terms:
        terms.append(NumNode(constant))
    return terms[0] if len(terms) == 1 else SumNode(terms)


SIMPLIFY.sym_sum = sym_sum


def _whole_of_parts(coefficients: dict[Node, int]) -> Node | None:
    """``(x // c) * (a*c) + (x % c) * a == x * a`` (floor division and Python modulo, c > 0): when the
    terms hold such a pair, take it out of ``coefficients`` and return ``x * a``; else None. (An index
    split into a row and a part and put back together: a cache line of a contiguous operand.)"""
    for base, a in coefficients.items():
        if not isinstance(base, ModNode) or not isinstance(base.b, int) or base.b <= 0 or a == 0:
            continue
        quotient = next((other for other in coefficients if isinstance(other, DivNode) and other.a == base.a
                         and other.b == base.b and coefficients[other] == a * base.b), None)
        if quotient is not None:
            del coefficients[base], coefficients[quotient]
            return _mul(base.a, a)
    return None


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


SIMPLIFY.sym_and = sym_and


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


SIMPLIFY.mul = _mul


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


SIMPLIFY.floordiv = _floordiv


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


SIMPLIFY.mod = _mod


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


SIMPLIFY.lt = _lt
