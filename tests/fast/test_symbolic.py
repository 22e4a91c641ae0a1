"""Tests for fast.shape.symbolic: simplification rules, sound bounds and exact evaluation."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fast.shape.symbolic import (
    AndNode,
    DivNode,
    LtNode,
    ModNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    Variable,
    is_sint,
    sint_prod,
    sym_and,
    sym_sum,
)

I = Variable("i", 0, 10)
J = Variable("j", 0, 3)
K = Variable("k", 0, 7)


def test_constant_folding_and_identities() -> None:
    assert NumNode(3) + 4 == 7 and isinstance(NumNode(3) + 4, NumNode)
    assert NumNode(7) // 2 == 3 and NumNode(-7) // 2 == -4 and NumNode(-7) % 2 == 1
    assert I * 1 is I
    assert I * 0 == 0
    assert I + 0 is I
    assert (I - I) == 0


def test_like_terms_are_combined() -> None:
    assert I * 3 + I * 2 == I * 5
    assert (I + 2) + (I * 2 + 3) == I * 3 + 5
    assert I * 3 + J - I * 3 == J
    assert J + I == I + J  # canonical order


def test_multiplication_distributes_over_sums() -> None:
    expression = (I + J * 2 + 1) * 3
    assert isinstance(expression, SumNode)
    assert expression == I * 3 + J * 6 + 3


def test_div_and_mod_of_split_sums() -> None:
    assert (I * 4 + J) // 4 is I
    assert (I * 4 + J) % 4 is J
    assert (I * 4 + J + 8) // 4 == I + 2
    assert (I * 8 + J * 2) // 2 == I * 4 + J
    assert (I * 4 + J * 2) // 8 == (I * 2 + J) // 4


def test_a_split_index_put_back_together_is_the_index() -> None:
    """`_whole_of_parts`: (x // c) * (a*c) + (x % c) * a is x * a (floor division, Python modulo), also
    for x a sum, for negative values and beside other terms; other coefficients stay split. Checked
    against Python's integers at every value of the ranges."""
    negative = Variable("n", -9, 9)
    cases = [((I // 3) * 48 + (I % 3) * 16, I * 16), ((I % 2) + (I // 2) * 2, I),
             (((I + J) // 4) * 8 + ((I + J) % 4) * 2 + K + 5, I * 2 + J * 2 + K + 5),
             ((negative // 4) * 12 + (negative % 4) * 3 + J, negative * 3 + J)]
    for split, whole in cases:
        assert split == whole, (split.render(), whole.render())
    kept = (I // 3) * 47 + (I % 3) * 16
    assert any(isinstance(term, DivNode) or isinstance(getattr(term, "a", None), DivNode)
               for term in kept.nodes)  # type: ignore[attr-defined]
    for i, j, n in itertools.product(range(11), range(4), range(-9, 10)):
        values = {I: i, J: j, negative: n}
        assert kept.substitute({v: NumNode(x) for v, x in values.items()}) == (i // 3) * 47 + (i % 3) * 16
        assert (((negative // 4) * 12 + (negative % 4) * 3).substitute({negative: NumNode(n)})) == n * 3


def test_div_mod_by_bounds() -> None:
    assert J // 4 == 0
    assert J % 4 is J
    assert K % 1 == 0
    assert I // 1 is I
    assert isinstance(I // 4, DivNode)
    assert isinstance(I % 4, ModNode)


def test_nested_div_mod_and_mul_div() -> None:
    assert (I // 2) // 3 == I // 6
    assert (I % 12) % 4 == I % 4
    assert (I * 4) // 4 is I
    assert (I * 4) // 2 == I * 2
    assert (I * 2) // 4 == I // 2
    assert (I * 4) % 2 == 0


def test_negative_divisors_and_values_floor_like_python() -> None:
    negative = Variable("n", -7, 7)
    for divisor in (-3, -2, 2, 3):
        for value in range(-7, 8):
            assert (negative // divisor).evaluate({"n": value}) == value // divisor
            assert (negative % divisor).evaluate({"n": value}) == value % divisor


def test_comparisons_fold_when_bounds_decide() -> None:
    assert (J < 4) == 1
    assert (J < 0) == 0
    assert isinstance(J < 2, LtNode)
    assert (J >= 0) == 1
    assert (I * 4 < 8) == (I < 2)
    assert (I * 4 + J < 8) == (I * 4 + J < 8)
    assert (I > 20) == 0 and (I <= 10) == 1


def test_and_node_rules() -> None:
    assert sym_and([J < 4, I < 11]) == 1
    assert sym_and([J < 2, NumNode(0)]) == 0
    assert sym_and([J < 2, NumNode(1)]) == (J < 2)
    both = sym_and([J < 2, I < 5])
    assert isinstance(both, AndNode) and both.evaluate({"i": 3, "j": 1}) == 1 and both.evaluate({"i": 6, "j": 1}) == 0
    assert sym_and([both, J < 2]) == both


def test_bind_unbind_round_trip() -> None:
    n = Variable("n", 1, 10)
    bound = n.bind(4)
    assert bound.val == 4 and bound == n and hash(bound) == hash(n)
    unbound, value = bound.unbind()
    assert unbound == n and unbound._val is None and value == 4
    assert (bound * 2 + 1).evaluate({}) == 9
    with pytest.raises(ValueError):
        n.bind(11)
    with pytest.raises(ValueError):
        n.unbind()
    with pytest.raises(ValueError):
        bound.bind(5)
    with pytest.raises(TypeError):
        n.bind("3")  # type: ignore[arg-type]


def test_substitute_vars_render() -> None:
    expression = (I * 4 + J) // 3 + K % 2
    assert expression.vars() == {I, J, K}
    replaced = expression.substitute({I: NumNode(2), J: J, K: NumNode(5)})
    assert replaced.vars() == {J}
    assert replaced.evaluate({"j": 3}) == (2 * 4 + 3) // 3 + 1
    assert isinstance(expression.render(), str) and "i" in expression.render()


def test_symbolic_divisors() -> None:
    n = Variable("n", 1, 8)
    assert (n * 4) // n == 4
    assert (I * n + J * n * 3) // n == I + J * 3
    assert (I * n) % n == 0
    assert n // n == 1
    assert isinstance(I // n, DivNode)
    with pytest.raises(ValueError):
        _ = I // Variable("z", -1, 3)
    signed = Variable("s", -9, 9)
    for quotient in (signed // n, signed % n, (signed * n + 3) // n):
        for s_value, n_value in itertools.product(range(-9, 10), range(1, 9)):
            value = quotient.evaluate({"s": s_value, "n": n_value})
            assert quotient.min <= value <= quotient.max


def test_errors_and_helpers() -> None:
    with pytest.raises(ZeroDivisionError):
        _ = I // 0
    with pytest.raises(ZeroDivisionError):
        _ = I % 0
    with pytest.raises(TypeError):
        NumNode(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Variable("x", 3, 1)
    with pytest.raises(TypeError):
        Variable("", 0, 1)
    with pytest.raises(ValueError):
        DivNode(I, 0)
    assert is_sint(3) and is_sint(I) and not is_sint(True) and not is_sint(2.0)
    assert sint_prod([2, 3, 4]) == 24 and isinstance(sint_prod([2, 3]), int)
    assert sint_prod([2, I]) == I * 2
    assert sym_sum([]) == 0 and sym_sum([1, 2]) == 3


def test_raw_node_bounds() -> None:
    assert (MulNode(J, -2).min, MulNode(J, -2).max) == (-6, 0)
    assert (ModNode(Variable("x", 5, 6), 4).min, ModNode(Variable("x", 5, 6), 4).max) == (1, 2)
    assert (LtNode(J, 10).min, LtNode(J, 10).max) == (1, 1)


# ---- property tests: random expressions against Python arithmetic ----

POOL = [Variable("a", 0, 3), Variable("b", -2, 2), Variable("c", 1, 4)]
Expression = tuple[Node, Callable[[dict[str, int]], int]]


def _leaf() -> st.SearchStrategy[Expression]:
    variables = st.sampled_from(POOL).map(lambda v: (v, lambda env, name=v.expr: env[name]))
    numbers = st.integers(-6, 6).map(lambda b: (NumNode(b), lambda env, b=b: b))
    return st.one_of(variables, numbers)


def _extend(children: st.SearchStrategy[Expression]) -> st.SearchStrategy[Expression]:
    def add(x: Expression, y: Expression) -> Expression:
        return x[0] + y[0], lambda env: x[1](env) + y[1](env)

    def mul(x: Expression, y: Expression) -> Expression:
        return x[0] * y[0], lambda env: x[1](env) * y[1](env)

    def scale(x: Expression, k: int) -> Expression:
        return x[0] * k, lambda env: x[1](env) * k

    def div(x: Expression, k: int) -> Expression:
        return x[0] // k, lambda env: x[1](env) // k

    def mod(x: Expression, k: int) -> Expression:
        return x[0] % k, lambda env: x[1](env) % k

    def div_c(x: Expression) -> Expression:
        return x[0] // POOL[2], lambda env: x[1](env) // env["c"]

    def mod_c(x: Expression) -> Expression:
        return x[0] % POOL[2], lambda env: x[1](env) % env["c"]

    def less(x: Expression, y: Expression) -> Expression:
        return x[0] < y[0], lambda env: int(x[1](env) < y[1](env))

    def both(x: Expression, y: Expression) -> Expression:
        return sym_and([x[0], y[0]]), lambda env: int(x[1](env) != 0 and y[1](env) != 0)

    divisors = st.integers(-5, 6).filter(lambda k: k != 0)
    return st.one_of(
        st.builds(add, children, children), st.builds(mul, children, children),
        st.builds(scale, children, st.integers(-4, 4)), st.builds(div, children, divisors),
        st.builds(mod, children, divisors), st.builds(less, children, children), st.builds(both, children, children),
        st.builds(div_c, children), st.builds(mod_c, children))


EXPRESSIONS = st.recursive(_leaf(), _extend, max_leaves=10)


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
def test_random_expressions_evaluate_exactly_within_bounds(expression: Expression) -> None:
    node, reference = expression
    names = [v.expr for v in POOL]
    for values in itertools.product(*(range(v.min, v.max + 1) for v in POOL)):
        env = dict(zip(names, values, strict=True))
        value = node.evaluate(env)
        assert value == reference(env), f"{node.render()} at {env}"
        assert node.min <= value <= node.max, f"{node!r} at {env} gave {value}"


@settings(max_examples=200, deadline=None)
@given(EXPRESSIONS, st.tuples(st.integers(0, 3), st.integers(-2, 2), st.integers(1, 4)))
def test_substituting_constants_folds_to_the_value(expression: Expression, values: tuple[int, int, int]) -> None:
    node, reference = expression
    env = {v.expr: x for v, x in zip(POOL, values, strict=True)}
    folded = node.substitute({v: NumNode(x) for v, x in zip(POOL, values, strict=True)})
    assert isinstance(folded, NumNode) and folded.b == reference(env)
