"""Plain, obviously correct implementations kept as oracles for the fast library code.

`reference_space` follows docs/method.md, Canonical output spaces, step by step: it materializes the full
decimal grid and loops over bins in Python (SciPy is called on whole arrays, only to keep the tests fast).
`ReferenceTrie` encodes every string on its own and keeps dicts of masses.
"""

import math
from collections import defaultdict

import numpy as np

from calibft.data.families import FAMILIES


def reference_space(family_id: str, params: dict, decimals: int, max_bins: int) -> tuple[list[str], list[float]]:
    fam = FAMILIES[family_id]
    law = fam.law(params)
    lo_support, hi_support = fam.support(params)
    if fam.integer:
        lo = math.floor(lo_support) if math.isfinite(lo_support) else math.floor(law.ppf(0.001))
        hi = math.ceil(hi_support) if math.isfinite(hi_support) else math.ceil(law.ppf(0.999))
        values = list(range(lo, hi + 1))[:max_bins]
        masses = law.pmf(np.array(values)).tolist()
        if not math.isfinite(hi_support):
            masses[-1] += 1.0 - float(law.cdf(values[-1]))
        strings = [str(v) for v in values]
    else:
        lower = max(float(law.ppf(0.001)), lo_support)
        upper = min(float(law.ppf(0.999)), hi_support)
        if not (math.isfinite(lower) and math.isfinite(upper)) or lower >= upper:
            lower, upper = -10.0, 10.0
        step = 10**-decimals
        grid = np.arange(math.ceil(lower / step), math.floor(upper / step) + 1) * step  # the full grid
        if len(grid) == 0:  # the authors' rule when no grid point falls inside: the rounded midpoint
            return [f"{round((lower + upper) / 2, decimals):.{decimals}f}"], [1.0]
        if len(grid) > max_bins:
            grid = grid[np.linspace(0, len(grid) - 1, max_bins, dtype=int)]
        edges = [lower] + [(grid[i] + grid[i + 1]) / 2 for i in range(len(grid) - 1)] + [upper]
        cdf = law.cdf(np.array(edges)).tolist()
        masses = [cdf[i + 1] - cdf[i] for i in range(len(grid))]
        masses[0] += float(law.cdf(lower))
        masses[-1] += 1.0 - float(law.cdf(upper))
        strings, merged = [], []
        for value, mass in zip(grid.tolist(), masses, strict=True):
            text = f"{value:.{decimals}f}"
            if strings and strings[-1] == text:
                merged[-1] += mass
            else:
                strings.append(text)
                merged.append(mass)
        masses = merged
    masses = [max(m, 0.0) for m in masses]
    total = sum(masses)
    return strings, [m / total for m in masses]


class ReferenceTrie:
    """prefix (tuple of token ids) -> mass, and prefix -> {next token: mass}."""

    def __init__(self, tokenizer, strings: list[str], probs: list[float]):
        self.prefix_mass: dict[tuple, float] = defaultdict(float)
        self.next_mass: dict[tuple, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.sequences = []
        for text, p in zip(strings, probs, strict=True):
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            self.sequences.append(tuple(ids))
            for t in range(len(ids)):
                self.prefix_mass[tuple(ids[:t])] += p
                self.next_mass[tuple(ids[:t])][ids[t]] += p

    def q(self, prefix: tuple) -> dict[int, float]:
        return {tok: m / self.prefix_mass[prefix] for tok, m in self.next_mass[prefix].items()}
