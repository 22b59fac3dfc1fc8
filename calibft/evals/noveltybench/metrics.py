"""NoveltyBench metric v1.0 (docs/metrics.md, NoveltyBench): equivalence classes, reward ratings and utility.

For one prompt, the 10 generations are partitioned greedily into equivalence classes (short texts by a
lexical rule, longer ones by a similarity classifier, passed in as `classify`); each generation's reward-model
score becomes a rating from 1 to 10 through fixed thresholds; only the first member of each class keeps its
rating (a repeat adds nothing new), and utility is the patience-discounted mean of those gains.

A split's means have bootstrap intervals over resamples of its prompts (`prompt_draws`), seeded by the split
alone (`bootstrap_seed`), so that every model and condition draws the same resamples of the same prompts and a
table can recompute them from the per-prompt rows (`split_summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from calibft.core.seeds import seed_for
from calibft.evals.bootstrap import REPLICATES, interval_block, resampled_sums

# Reward thresholds of the Skywork-Reward-Gemma-2-27B-v0.2 scores: rating = 1 + how many lie strictly below.
THRESHOLDS = np.array([-7.71875, -6.28125, -6.0, -5.71875, -5.5, -5.0, -4.375, -3.4375, -2.046875])
PATIENCE = 0.8
BOOTSTRAP_KEYS = ("utility", "distinct")  # the per-prompt scores whose split means have intervals
LEXICAL_MAX_TOKENS = 5

Classify = Callable[[str, str], bool]


def ratings(rewards: np.ndarray | Sequence[float]) -> np.ndarray:
    """Ratings 1..10 of reward scores: 1 + the number of thresholds strictly below each reward."""
    # side="left" counts thresholds t < r, so a reward equal to a threshold does not pass it.
    return 1 + np.searchsorted(THRESHOLDS, np.asarray(rewards, dtype=float), side="left")


def rating(reward: float) -> int:
    """The rating of one reward score."""
    return int(ratings([reward])[0])


def lexically_equivalent(a: str, b: str) -> bool | None:
    """The lexical rule for short texts: None when either text has more than 5 tokens (the classifier decides)."""
    t0, t1 = a.strip().lower().split(), b.strip().lower().split()
    m = max(len(t0), len(t1))
    if m > LEXICAL_MAX_TOKENS:
        return None
    return 2 * len(set(t0) & set(t1)) >= m


def equivalent(a: str, b: str, classify: Classify) -> bool:
    """Whether two generations say the same thing: the lexical rule, else the classifier."""
    lexical = lexically_equivalent(a, b)
    return bool(classify(a, b)) if lexical is None else lexical


def partition(responses: Sequence[str], classify: Classify) -> list[int]:
    """Class id of each response, classes numbered in creation order.

    Greedy, as in metric v1.0: each response is compared with the first member of every existing class in
    creation order, joins the first equivalent one, or opens a new class. The relation is not transitive, so
    the result depends on the order of the responses; comparing only with first members is part of the metric.
    """
    representatives: list[int] = []  # index of each class's first member
    class_ids: list[int] = []
    for i, response in enumerate(responses):
        for c, first in enumerate(representatives):
            if equivalent(responses[first], response, classify):
                class_ids.append(c)
                break
        else:
            class_ids.append(len(representatives))
            representatives.append(i)
    return class_ids


def gains(class_ids: Sequence[int], ratings: Sequence[float]) -> np.ndarray:
    """Each generation's gain: its rating if it opens its class, else 0."""
    if len(class_ids) != len(ratings):
        raise ValueError(f"{len(class_ids)} class ids for {len(ratings)} ratings")
    seen: set[int] = set()
    first = np.zeros(len(class_ids), dtype=bool)
    for i, c in enumerate(class_ids):
        first[i] = c not in seen
        seen.add(c)
    return np.where(first, np.asarray(ratings, dtype=float), 0.0)


def utility(class_ids: Sequence[int], ratings: Sequence[float], patience: float = PATIENCE) -> float:
    """sum_i patience^i g_i / sum_i patience^i over the generations in order."""
    g = gains(class_ids, ratings)
    weights = patience ** np.arange(len(g))
    return float(weights @ g / weights.sum())


def distinct(class_ids: Sequence[int]) -> int:
    """The number of equivalence classes."""
    return len(set(class_ids))


def score_prompt(responses: Sequence[str], rewards: Sequence[float], classify: Classify) -> dict[str, Any]:
    """One prompt's partition, ratings, utility and distinct count, from its generations and their rewards."""
    class_ids = partition(responses, classify)
    r = ratings(rewards)
    return {
        "class_ids": class_ids,
        "ratings": r.tolist(),
        "utility": utility(class_ids, r),
        "distinct": distinct(class_ids),
    }


def summarize_prompts(per_prompt: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean utility and distinct per split, and pooled over all prompts of all splits (the headline).

    Each entry needs `split`, `utility` and `distinct`. Pooling is by prompt, so a split weighs by its size
    (wildchat's 1000 prompts outweigh curated's 100), as in the paper's headline number.
    """
    if not per_prompt:
        raise ValueError("no prompts to summarize")

    def means(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "n_prompts": len(rows),
            "utility": float(np.mean([r["utility"] for r in rows])),
            "distinct": float(np.mean([r["distinct"] for r in rows])),
        }

    splits = sorted({r["split"] for r in per_prompt})
    return {
        "splits": {s: means([r for r in per_prompt if r["split"] == s]) for s in splits},
        "pooled": means(per_prompt),
    }


def bootstrap_seed(split: str) -> int:
    """The seed of a split's bootstrap: of the split alone (the scoring job has no run seed), so that every model
    and condition resamples the split's prompts alike."""
    return seed_for("bootstrap", "noveltybench", split)


def prompt_draws(rows: Sequence[Mapping[str, Any]], seed: int, replicates: int) -> dict[str, np.ndarray]:
    """[replicates] of the mean utility and mean distinct count of `rows` (one split's per-prompt rows, in file
    order) over resamples of its prompts, from `np.random.default_rng(seed)`."""
    values = np.array([[row[key] for key in BOOTSTRAP_KEYS] for row in rows], dtype=np.float64)
    sums = resampled_sums(values.reshape(len(rows), len(BOOTSTRAP_KEYS)), np.random.default_rng(seed), replicates)
    means = sums / len(rows) if rows else np.full(sums.shape, np.nan)
    return {key: means[:, i] for i, key in enumerate(BOOTSTRAP_KEYS)}


def split_summary(rows: list[dict], split: str, replicates: int = REPLICATES) -> dict:
    """summary.json's figures of one split's rows: the mean utility and distinct count over its prompts and
    (with `replicates`) their bootstrap intervals over resamples of the prompts, seeded by the split."""
    summary = summarize_prompts(rows)["pooled"]
    if replicates:
        seed = bootstrap_seed(split)
        draws = prompt_draws(rows, seed, replicates)
        summary["intervals"] = interval_block(draws, seed, "prompts", units={split: len(rows)})
    return summary
