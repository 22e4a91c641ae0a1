"""Hypothesis strategies for random valid programs and deliberately invalid ones.

`programs(cfg)` draws: for about `cfg.p_symbolic` of programs a symbolic program (symbolic.py:
shapes holding bound Variables, replayed under several bindings); otherwise one or two leaves; for
about `cfg.p_multi` of programs a shard and the sharding actions; rarely a large (split) reduction
or a ring all-reduce, or a large op that threads split (`cfg.p_large`); then up to `cfg.max_ops`
weighted actions; fetches of the newest values; and
for about `cfg.p_invalid` of programs one invalid last step with its expected error type. Actions
earlier in a list are simpler (Hypothesis shrinks toward them). The actions of optimized.py
(matmuls, row reductions, replays, gathers) reach fast's optimization layer.
"""
from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from conformance.profiles import GenConfig
from conformance.program import Program
from conformance.strategies import actions as a
from conformance.strategies import disk as d
from conformance.strategies import optimized as o
from conformance.strategies import sharding as s
from conformance.strategies import special as sp
from conformance.strategies import symbolic
from conformance.strategies.builder import Builder
from conformance.strategies.invalid import add_invalid
from conformance.vocab import DTYPES

Action = Callable[[Builder], "bool | str"]

SINGLE: tuple[tuple[Action, int], ...] = (
    (a.act_binary, 6), (a.act_unary, 4), (a.act_movement, 5), (a.act_reduce, 3), (a.act_leaf, 2),
    (a.act_const, 2), (a.act_ternary, 2), (a.act_cast, 3), (sp.act_fold, 2), (a.act_bitcast, 1),
    (a.act_contiguous, 1), (a.act_copy, 1), (a.act_realize, 1), (a.act_custom, 1), (sp.act_assign, 1),
    (s.act_shard, 1), (d.act_disk, 1), (a.act_row_chain, 2),
    (o.act_matmul, 2), (o.act_row_reduces, 1), (o.act_replay, 1), (o.act_gather, 1),
)
MULTI: tuple[tuple[Action, int], ...] = SINGLE + (
    (s.act_reduce_sharded, 3), (s.act_shrink_one, 2), (s.act_mixed_axes, 2), (s.act_shard, 2),
    (s.act_copy_out, 1),
)


def _weighted(table: tuple[tuple[Action, int], ...]) -> list[Action]:
    out: list[Action] = []
    for action, weight in table:
        out.extend([action] * weight)
    return out


def run_actions(b: Builder, table: tuple[tuple[Action, int], ...], count: int) -> bool:
    """Run `count` actions; False when one ended the program with an expected error."""
    choices = _weighted(table)
    for _ in range(count):
        for _attempt in range(3):
            result = b.choose(choices)(b)
            if result == sp.STOP:
                return False
            if result:
                break
    return True


@st.composite
def programs(draw: st.DrawFn, cfg: GenConfig = GenConfig()) -> Program:  # noqa: B008 - frozen default
    b = Builder(draw, cfg)
    if b.chance(cfg.p_symbolic):
        return symbolic.build(b)
    multi = b.chance(cfg.p_multi)
    if multi:
        b.leaf(b.choose(DTYPES), b.shape(min_rank=1, allow_zero=False), b.device())
        s.act_shard(b)
    else:
        a.act_leaf(b)
    if b.chance(0.3):
        a.act_leaf(b)
    if b.chance(cfg.p_big):
        sp.act_big_reduce(b)
    if b.chance(cfg.p_ring_big):
        sp.act_ring_reduce(b)
    if b.chance(cfg.p_large):
        o.act_large(b)
    if not run_actions(b, MULTI if multi else SINGLE, b.integer(1, cfg.max_ops)):
        return b.finish(expect="RuntimeError")
    b.fetch_some()
    if b.chance(cfg.p_invalid):
        expect = add_invalid(b)
        if expect is not None:
            return b.finish(expect=expect)
    return b.finish()
