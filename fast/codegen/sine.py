"""float64 SIN as branch-free IR (used by fast/codegen/transcendental.py, whose rules it follows).

Both reductions run on a = |x| in every lane and one is selected with WHERE; the sign is put back
at the end (sin is odd):
- |x| < 2^20: Cody-Waite with pi/2 in parts of 33, 33, 33 and 53 bits (`float_ir._cody_waite`).
- |x| >= 2^20: Payne-Hanek with exact products. The exponents 20..1023 are cut into blocks of
  `SPAN` = 73; a lane's block (a WHERE chain on `a < 2^B`) gives the scale 2^-B and the window
  2^B * 2/pi mod 2^54, truncated, as `CHUNKS` = 10 chunks D_j of 25 bits (selected as five 50-bit
  doubles, each split exactly). a_s = a * 2^-B in [1, 2^73) is cut at fixed bit positions into
  `PIECES` = 5 signed 25-bit pieces p_i (p_i a multiple of 2^(25i-52)). Every p_i * D_j is exact;
  those with j < i are multiples of 4 and are dropped, and for each diagonal d = j - i < 6 the five
  products share the grid 2^(-23-25d) and fit together in 53 bits, so each diagonal sum S_d is exact
  (|S_d| <= 6 * 2^(26-25d)). The dropped diagonals d >= 6 and the window's truncation are below
  2^-121, i.e. 2^-59 of the smallest |x * 2/pi mod 1| of any double (about 2^-61.5, for
  x = 6381956970095103 * 2^797). S_0 mod 4 + S_1 is exact; its nearest integer n gives the
  quadrant and f = S_0 mod 4 + S_1 - n is exact; S_2..S_5 are added with TwoSums (their rounding
  errors kept in a low word): wherever the result is tiny the sums before it cancel exactly, so the
  error stays relative (about 2^-100). The fraction is multiplied by pi/2 with a Veltkamp split (the
  products with the 26-bit head of pi/2 are exact) into r_hi + r_lo.
Then the float64 kernels of `float_ir._kernels` (minimax, |r| <= pi/4 * (1 + 2^-20)), and
|x| < 2^-26 returns x (sin(x) rounds to x; keeps -0.0 and subnormals), inf and NaN give NaN.
"""
from __future__ import annotations

import math

from fast.codegen import float_ir
from fast.codegen.float_ir import _V, F64, MAGIC52

# 2/pi = _TWO_OVER_PI_WIDE * 2^-1408 (truncated), computed with Machin's formula (checked by the tests)
_TWO_OVER_PI_WIDE = int(
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921c"
    "fe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980f"
    "ef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f78a5292ea6bfb5fb11f8d5d08"
    "56033046fc7b6babf0cfbc209af4361da9e391615ee61b086599855f14a06840", 16)
_WIDE_BITS = 1408
WIDTH = 25  # bits per piece of a_s and per chunk of the window
PIECES = 5
SPAN = WIDTH * PIECES - 52  # exponents per block: a_s < 2^SPAN has PIECES pieces
DIAGONALS = 6
CHUNKS = PIECES + DIAGONALS - 1
SMALL = 20  # Cody-Waite below 2^SMALL
BLOCKS = tuple(range(SMALL, 1024, SPAN))  # block bases B


def window_chunks(base: int) -> list[int]:
    """The 25-bit integers c_j, D_j = c_j * 2^(29-25j): bits of 2^base * 2/pi below 2^54."""
    chunks = []
    for j in range(CHUNKS):
        shift = _WIDE_BITS - base + 29 - WIDTH * j
        assert shift >= 0
        chunks.append((_TWO_OVER_PI_WIDE >> shift) & ((1 << WIDTH) - 1))
    return chunks


def _const(like: _V, value: float) -> _V:
    return _V(like.b, like.b.const(value, like.dtype))


def _select(conds: list[_V], values: list[float], like: _V) -> _V:
    """values[k] for the lane's block k; conds[k-1] is `a < 2^BLOCKS[k]`."""
    out = _const(like, values[-1])
    for k in range(len(values) - 1, 0, -1):
        out = conds[k - 1].where(values[k - 1], out)
    return out


def _round_to(v: _V, grid_exp: int) -> _V:
    """v rounded to a multiple of 2^grid_exp (exact for |v| < 2^(grid_exp + 51))."""
    magic = 1.5 * 2.0 ** (52 + grid_exp)
    return (v + magic) - magic


def _chunks(conds: list[_V], like: _V) -> list[_V]:
    """The window chunks D_0..D_{CHUNKS-1} of the lane's block, signed after splitting pairs."""
    tables = [window_chunks(base) for base in BLOCKS]
    out: list[_V] = []
    for m in range(0, CHUNKS, 2):
        top = 29 - WIDTH * m  # exponent of D_m's lowest bit
        if m + 1 < CHUNKS:
            values = [math.ldexp(t[m], top) + math.ldexp(t[m + 1], top - WIDTH) for t in tables]
            pair = _select(conds, values, like)
            head = _round_to(pair, top)
            out += [head, pair - head]
        else:
            out.append(_select(conds, [math.ldexp(t[m], top) for t in tables], like))
    return out


def _payne_hanek(a: _V) -> tuple[_V, _V, _V]:
    """(n mod 4, r_hi, r_lo) with a = n*pi/2 + r_hi + r_lo, for float64 2^20 <= a < inf."""
    conds = [a.lt(2.0**base) for base in BLOCKS[1:]]
    scaled = a * _select(conds, [2.0**-base for base in BLOCKS], a)  # exact, in [1, 2^SPAN)
    pieces: list[_V] = []
    rest = scaled
    for i in range(PIECES - 1, 0, -1):
        piece = _round_to(rest, WIDTH * i - 52)
        pieces.insert(0, piece)
        rest = rest - piece
    pieces.insert(0, rest)
    chunks = _chunks(conds, a)
    sums = []
    for d in range(DIAGONALS):
        total = pieces[0] * chunks[d]
        for i in range(1, PIECES):
            total = total + pieces[i] * chunks[i + d]  # exact: one grid, < 2^53 of it
        sums.append(total)
    s = (sums[0] - ((sums[0] * 0.25 + MAGIC52) - MAGIC52) * 4.0) + sums[1]  # exact, |s| < 14
    nf, n = float_ir._rint(s)
    hi, lo = float_ir._two_sum(s - nf, sums[2])
    hi, err = float_ir._two_sum(hi, sums[3])
    lo = (lo + err) + (sums[4] + sums[5])
    # (hi + lo) * pi/2: hi = hh + hl (Veltkamp), products with the 26-bit head of pi/2 exact
    head, tail = float_ir._parts(float_ir._PI_OVER_2, 254, (26,))
    c = hi * float(2**27 + 1)
    hh = c - (c - hi)
    p1, p2 = hh * head, (hi - hh) * head
    s1 = p1 + p2
    t = (p2 - (s1 - p1)) + (hi * tail + lo * (math.pi / 2))
    r_hi = s1 + t
    return n, r_hi, t - (r_hi - s1)


def sin_f64(x: _V) -> _V:
    """sin(x) for float64 (see the module docstring)."""
    a = x.max(-x)
    n_small, hi_small, lo_small = float_ir._cody_waite(a, (33, 33, 33))
    n_big, hi_big, lo_big = _payne_hanek(a)
    small = a.lt(2.0**SMALL)
    res = float_ir._kernels(small.where(n_small, n_big), small.where(hi_small, hi_big),
                            small.where(lo_small, lo_big), float_ir._F64)
    res = x.lt(0.0).where(-res, res)
    res = a.lt(2.0**-26).where(x, res)  # sin(x) rounds to x; keeps -0.0 and subnormals exact
    return a.lt(math.inf).where(res, math.nan)


assert F64.name == "float64"
