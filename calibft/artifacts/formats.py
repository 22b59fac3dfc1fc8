"""How the tables and captions print numbers and counts: the paper's rounding per metric (`format_w1`,
`format_kl`, `format_three`, `format_rate`, `format_decimals`, `format_fixed`), any number in a few
significant digits (`format_number`) and small counts as words (`count_words`)."""

from __future__ import annotations

import math
import numbers

COUNT_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def trim_zeros(text: str) -> str:
    """A decimal's text without the trailing zeros after its point, nor a bare point (`0.130` → `0.13`,
    `5.00` → `5`); text without a point is returned as it is."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_fixed(value: float, decimals: int) -> str:
    """Rounded to `decimals` decimals, trailing zeros (and a bare point) dropped; never scientific."""
    return trim_zeros(f"{value:.{decimals}f}")


def format_decimals(value: float, decimals: int) -> str:
    """The paper's numbers: rounded to `decimals` decimals, trailing zeros dropped (`0.13`, `5`); from 1000 on,
    or below what the decimals resolve, three significant digits in scientific notation (`5.47e+03`)."""
    magnitude = abs(value)
    if magnitude >= 1000 or 0 < magnitude < 0.5 * 10.0**-decimals:
        return f"{value:.2e}"
    return format_fixed(value, decimals)


def format_w1(value: float) -> str:
    return format_decimals(value, 4)


def format_kl(value: float) -> str:
    return format_decimals(value, 2)


def format_three(value: float) -> str:
    """Three decimals, trailing zeros dropped (`0.374`, `0.24`, `2`); below what three decimals resolve,
    `1.01e-05` (a base model's mass on the space can be that small, and a percentage would print it as 0.0%).
    TV, NoveltyBench utility and distinct counts, gp-IRT, bits per byte and probability mass."""
    return format_decimals(value, 3)


def format_rate(value: float) -> str:
    """`87.9%`; the `.tex` writer escapes the percent sign."""
    return f"{value:.1%}"


def format_number(value: float, digits: int = 6) -> str:
    """A number in at most `digits` significant digits, trailing zeros dropped; scientific (`2e-4`) when
    it is below 1e-3 or at least 1e6 in magnitude. Integers print whole."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value != 0 and not 1e-3 <= abs(value) < 1e6:
        mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
        return f"{trim_zeros(mantissa)}e{int(exponent)}"
    return f"{value:.{digits}g}"


def count_words(n: int) -> str:
    """`three` for 3, up to twelve; digits from 13 on."""
    return COUNT_WORDS[n] if n < len(COUNT_WORDS) else str(n)
