"""GBNF for JSON numbers within bounds: integer ranges digit by digit, decimals by unit interval."""

from __future__ import annotations

import math
from fractions import Fraction

from spark.engine.grammar.gbnf import literal

_BOUND_LIMIT = 10**9  # fractions are only written next to bounds smaller than this (float rounding)


def _digits(a: str, b: str) -> list[str]:
    """GBNF sequences for the digit strings of equal length between a and b (inclusive)."""
    if not a:
        return [""]
    if a == b:
        return [literal(a)]
    if a[0] == b[0]:
        return [f"{literal(a[0])} {s}".strip() for s in _digits(a[1:], b[1:])]
    n = len(a) - 1
    low_full = a[1:] == "0" * n
    high_full = b[1:] == "9" * n
    out = []
    if not low_full:
        out += [f"{literal(a[0])} {s}".strip() for s in _digits(a[1:], "9" * n)]
    first = int(a[0]) + (0 if low_full else 1)
    last = int(b[0]) - (0 if high_full else 1)
    if first <= last:
        d = literal(str(first)) if first == last else f"[{first}-{last}]"
        out.append(f"{d} [0-9]{{{n}}}" if n > 1 else (f"{d} [0-9]" if n == 1 else d))
    if not high_full:
        out += [f"{literal(b[0])} {s}".strip() for s in _digits("0" * n, b[1:])]
    return out


def _natural(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the decimal integers lo..hi (lo >= 0; hi None: no limit), no leading zeros."""
    out: list[str] = []
    top = len(str(hi)) if hi is not None else len(str(lo))
    for width in range(len(str(lo)), top + 1):
        a = max(lo, 10 ** (width - 1) if width > 1 else 0)
        b = 10**width - 1 if hi is None else min(hi, 10**width - 1)
        if a <= b:
            out += _digits(str(a), str(b))
    if hi is None and top < 16:
        out.append(f"[1-9] [0-9]{{{top},15}}")
    return out


def int_range(lo: int | None, hi: int | None) -> str:
    """GBNF for the JSON integers lo..hi (None: unbounded on that side)."""
    alts: list[str] = []
    if lo is None or lo < 0:  # negative part: -m for m in max(1, -hi)..-lo
        m_lo = max(1, -hi) if hi is not None else 1
        m_hi = -lo if lo is not None else None
        if m_hi is None or m_lo <= m_hi:
            alts.append(f'"-" ( {" | ".join(_natural(m_lo, m_hi))} )')
    if hi is None or hi >= 0:
        alts += _natural(max(0, lo) if lo is not None else 0, hi)
    return " | ".join(alts)


def number_range(lo: Fraction | None, lo_x: bool, hi: Fraction | None, hi_x: bool) -> list[str]:
    """Alternatives for JSON numbers inside the bounds (a subset of them).

    Integers inside the range, plus decimals `m.ddd` whose whole unit interval
    [m, m+1) lies inside it (and `-m.ddd` for (-(m+1), -m]), so every decimal
    written is in range whatever its digits. Fractions have at most 6 digits
    and only appear next to bounds below 1e9, so that float parsing can never
    round a value onto an excluded bound.
    """
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    alts = []
    if ilo is None or ihi is None or ilo <= ihi:
        alts.append(f"( {int_range(ilo, ihi)} )")
    if any(b is not None and abs(b) >= _BOUND_LIMIT for b in (lo, hi)):
        return alts
    frac = '"." [0-9]{1,6}'
    nonzero = '"." [0-9]{0,5} [1-9]'  # strictly above the integer part

    def span(a: int, b: int | None) -> str | None:
        return " | ".join(_natural(a, b)) if b is None or a <= b else None

    # m.ddd in [m, m+1): m >= lo (m > lo when exclusive, or m == lo with nonzero digits), m + 1 <= hi.
    p_lo = 0 if lo is None else max(0, math.floor(lo) + 1 if lo_x else math.ceil(lo))
    p_hi = None if hi is None else math.floor(hi) - 1
    if (s := span(p_lo, p_hi)) is not None:
        alts.append(f"( {s} ) {frac}")
    if lo is not None and lo_x and lo.denominator == 1 and lo >= 0 and (hi is None or lo + 1 <= hi):
        alts.append(f"{literal(str(lo.numerator))} {nonzero}")
    # -m.ddd in (-(m+1), -m]: -m <= hi (-m < hi when exclusive, or -m == hi with nonzero digits), -(m+1) >= lo.
    n_lo = 0 if hi is None else max(0, math.floor(-hi) + 1 if hi_x else math.ceil(-hi))
    n_hi = None if lo is None else math.floor(-lo) - 1
    if (s := span(n_lo, n_hi)) is not None:
        alts.append(f'"-" ( {s} ) {frac}')
    if hi is not None and hi_x and hi.denominator == 1 and hi <= 0 and (lo is None or hi - 1 >= lo):
        alts.append(f'"-" {literal(str(-hi.numerator))} {nonzero}')
    return alts
