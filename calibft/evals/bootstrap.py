"""Percentile bootstrap intervals of a structured evaluation's aggregates (docs/metrics.md, Intervals).

Each replicate draws, within every prompt, as many of its samples as it has, with replacement, and computes the
aggregate as metrics.json does (`calibft.evals.metrics.structured_aggregate`). The prompts stay those of the
benchmark: a reproduction samples the same prompts as the paper, so what separates two runs of one model is
the sampling within each prompt. With `resample_prompts`, a replicate first draws, within every family, as
many of its prompts as it has, with replacement: the interval then also covers other prompts of the same
families, and a prompt's logit KL (from fixed teacher-forced paths, otherwise kept as it is) moves with the
choice of prompts. The interval of a metric is the (1 - level) / 2 and (1 + level) / 2 quantiles of its
replicates where they are defined; `undefined` counts the replicates where it is not (a family with no valid
sample in the replicate).

The other evaluations share the helpers below (docs/metrics.md, Intervals): `resample_indices` and
`resampled_sums` draw the resamples, `interval_block` turns each metric's replicates into the `intervals` of an
evaluation's JSON (keeping, where a table derives a cell from several runs, the replicates themselves under
`draws`), and `paired_draws` reads those replicates back for such a cell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from calibft.data.families import family
from calibft.data.grid import Prompt
from calibft.evals.metrics import coupling_quantiles, finite_or_none, structured_aggregate, w1_scale, wasserstein1

REPLICATES = 1000
LEVEL = 0.95
METRICS = ("w1_norm", "logit_kl", "valid_rate")
# Cells of the [replicates, rows] draw that `resampled_sums` holds at once (per column summed).
BLOCK_CELLS = 1 << 20


@dataclass
class PromptSamples:
    """One prompt's samples: each one's value where it is valid, NaN where it is not."""

    prompt: Prompt
    values: np.ndarray
    logit_kl: float | None = None
    _quantiles: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.law = family(self.prompt.family).law(self.prompt.params)
        self.scale = w1_scale(self.law)

    @classmethod
    def of_records(cls, prompt: Prompt, records: Sequence[Mapping], logit_kl: float | None = None) -> PromptSamples:
        values = np.array([r["value"] if r["valid"] else math.nan for r in records], dtype=np.float64)
        return cls(prompt, values, logit_kl)

    def resampled_row(self, rng: np.random.Generator) -> dict:
        """The prompt's metrics (as `prompt_metrics` computes them) on a resample of its samples."""
        n = len(self.values)
        drawn = self.values[rng.integers(0, n, n)] if n else self.values
        valid = drawn[~np.isnan(drawn)]
        k = len(valid)
        if k and k not in self._quantiles:
            self._quantiles[k] = coupling_quantiles(self.law, k)
        w1 = wasserstein1(valid, self.law, self._quantiles.get(k))
        return {
            "family": self.prompt.family,
            "w1": finite_or_none(w1),
            "w1_norm": finite_or_none(w1 / self.scale) if self.scale > 0 else None,
            "logit_kl": self.logit_kl,
            "valid_rate": k / n if n else None,
        }


def percentile_interval(replicates: Sequence[float | None] | np.ndarray, level: float = LEVEL) -> list[float] | None:
    """[low, high]: the (1 - level) / 2 and (1 + level) / 2 quantiles of the defined replicates (None, NaN and
    infinities are undefined); None without any."""
    values = np.asarray(replicates, dtype=np.float64)  # None becomes NaN
    defined = values[np.isfinite(values)]
    if not len(defined):
        return None
    low, high = np.quantile(defined, [(1 - level) / 2, (1 + level) / 2])
    return [float(low), float(high)]


def structured_intervals(
    prompts: Sequence[PromptSamples],
    seed: int,
    replicates: int = REPLICATES,
    level: float = LEVEL,
    logit_kl_across_families: str = "mean",
    resample_prompts: bool = False,
    w1_nonfinite_prompts: str = "undefined",
) -> dict:
    """The interval of each aggregate metric, with how it was drawn: metrics.json's `intervals`. The switches are
    `structured_aggregate`'s."""
    rng = np.random.default_rng(seed)
    by_family: dict[str, list[PromptSamples]] = {}
    for prompt in prompts:
        by_family.setdefault(prompt.prompt.family, []).append(prompt)
    draws: dict[str, list[float | None]] = {metric: [] for metric in METRICS}
    for _ in range(replicates):
        drawn = []
        for members in by_family.values():
            picks = rng.integers(0, len(members), len(members)) if resample_prompts else range(len(members))
            drawn += [members[i] for i in picks]
        rows = [prompt.resampled_row(rng) for prompt in drawn]
        aggregate = structured_aggregate(rows, logit_kl_across_families, w1_nonfinite_prompts)
        for metric in METRICS:
            draws[metric].append(aggregate[metric])
    return {
        "level": level,
        "replicates": replicates,
        "seed": seed,
        "resampled": ("prompts within families, " if resample_prompts else "") + "samples within prompts",
        **{metric: percentile_interval(draws[metric], level) for metric in METRICS},
        "undefined": {metric: sum(v is None for v in draws[metric]) for metric in METRICS},
    }


# ---------------------------------------------------------------------------------------------- shared helpers


def resample_indices(rng: np.random.Generator, n: int, replicates: int) -> np.ndarray:
    """[replicates, n]: the rows each replicate draws, n of 0..n-1 with replacement."""
    return rng.integers(0, n, size=(replicates, n))


def resampled_sums(values: np.ndarray, rng: np.random.Generator, replicates: int) -> np.ndarray:
    """[replicates, k]: the column sums of `values` [n, k] over each replicate's resample of its n rows (zeros
    without rows). The draws come `max(1, BLOCK_CELLS // n)` replicates at a time, to bound the memory of a
    large n; the blocks depend on n alone, so the sums are a function of the generator's seed, n and
    `replicates`."""
    values = np.asarray(values, dtype=np.float64)
    n, k = values.shape
    if n == 0:
        return np.zeros((replicates, k))
    block = max(1, BLOCK_CELLS // n)
    sums = [
        values[resample_indices(rng, n, min(block, replicates - start))].sum(axis=1)
        for start in range(0, replicates, block)
    ]
    return np.concatenate(sums) if sums else np.zeros((0, k))


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator elementwise, NaN where the denominator is 0 (an undefined replicate)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator != 0, numerator / denominator, math.nan)


def replicate_list(values: np.ndarray) -> list[float | None]:
    """Replicates as JSON keeps them: floats, None where undefined (not finite)."""
    return [v if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64).tolist()]


def interval_block(
    draws: Mapping[str, np.ndarray],
    seed: int,
    resampled: str,
    level: float = LEVEL,
    kept: Iterable[str] = (),
    units: Mapping[str, int] | None = None,
) -> dict:
    """The `intervals` of an evaluation's JSON from the replicates of each metric (`draws`, NaN where a replicate
    leaves the metric undefined): how they were drawn (`level`, `replicates`, `seed`, `resampled` and, where
    given, `units`: how many units each stratum resampled), each metric's `percentile_interval`, `undefined`
    (the count of undefined replicates per metric) and, for the metrics of `kept`, the replicates themselves
    (`draws`), from which a table derives the interval of a cell computed from several runs (`paired_draws`)."""
    arrays = {key: np.asarray(values, dtype=np.float64) for key, values in draws.items()}
    block: dict = {
        "level": level,
        "replicates": max((len(values) for values in arrays.values()), default=0),
        "seed": seed,
        "resampled": resampled,
        **({"units": dict(units)} if units is not None else {}),
        **{key: percentile_interval(values, level) for key, values in arrays.items()},
        "undefined": {key: int(np.sum(~np.isfinite(values))) for key, values in arrays.items()},
    }
    kept = list(kept)
    if kept:
        block["draws"] = {key: replicate_list(arrays[key]) for key in kept}
    return block


PAIRING = ("seed", "replicates", "resampled", "units")  # what two runs' draws must share to be paired


def paired_draws(blocks: Sequence[Mapping | None], key: str) -> np.ndarray | None:
    """[runs, replicates]: the kept replicates of `key` of each run's `intervals` block (NaN where undefined),
    replicate i of every run drawn from the same resample of units the runs share (the same seed, replicate
    count, resampling and units); None when a run has no such replicates or the runs' draws differ in any of
    those, so that combining replicate i of each would not be a bootstrap of the shared units."""
    if not blocks or any(block is None or key not in block.get("draws", {}) for block in blocks):
        return None
    first = blocks[0]
    if any(any(block.get(name) != first.get(name) for name in PAIRING) for block in blocks):
        return None
    return np.array([block["draws"][key] for block in blocks], dtype=np.float64)
