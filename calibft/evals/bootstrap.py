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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from calibft.evals.metrics import coupling_quantiles, finite_or_none, structured_aggregate, w1_scale, wasserstein1
from calibft.families import family
from calibft.grid import Prompt

REPLICATES = 1000
LEVEL = 0.95
METRICS = ("w1_norm", "logit_kl", "valid_rate")


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
            "w1_norm": finite_or_none(w1 / self.scale) if self.scale > 0 else None,
            "logit_kl": self.logit_kl,
            "valid_rate": k / n if n else None,
        }


def percentile_interval(replicates: Sequence[float | None], level: float = LEVEL) -> list[float] | None:
    """[low, high]: the (1 - level) / 2 and (1 + level) / 2 quantiles of the defined replicates; None without
    any."""
    defined = np.array([v for v in replicates if v is not None], dtype=np.float64)
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
) -> dict:
    """The interval of each aggregate metric, with how it was drawn: metrics.json's `intervals`."""
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
        aggregate = structured_aggregate(rows, logit_kl_across_families)
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
