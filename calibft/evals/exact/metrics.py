"""The exact evaluation's computations from the model's and the target's probabilities on the evaluation space and
the structured samples: each prompt's figures (`prompt_metrics`), the aggregates' bounds (`aggregate_bounds`)
and metrics.json (`score`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibft.data.families import family
from calibft.data.grid import Prompt
from calibft.evals.metrics import (
    exact_aggregate,
    exact_kl,
    exact_wasserstein1,
    family_rows,
    finite_or_none,
    sampled_w1_spread,
    undefined_families,
    w1_scale,
    wasserstein1,
)


def space_values(strings: np.ndarray) -> np.ndarray:
    """float64 values of a space's canonical strings (bytes)."""
    return np.asarray(strings).astype(np.float64)


def on_space_indices(records: Sequence[dict], strings: np.ndarray) -> np.ndarray:
    """The index in the space of every answer whose text is one of its canonical `strings`, in answer order."""
    index = {string.decode(): i for i, string in enumerate(strings.tolist())}
    found = (index.get(record["text"]) for record in records)
    return np.array([i for i in found if i is not None], dtype=np.int64)


def _normalized(w1: float, scale: float) -> float | None:
    return finite_or_none(w1 / scale) if scale > 0 else None


def _spread(values, probs, law, n: int, draws: int, rng, scale: float) -> list[float] | None:
    spread = sampled_w1_spread(values, probs, law, n, draws, rng)
    if spread is None or not scale > 0:
        return None
    return [float(spread[0] / scale), float(spread[1] / scale)]


def prompt_metrics(
    prompt: Prompt,
    values: np.ndarray,
    strings: np.ndarray,
    model_probs: np.ndarray,
    target_probs: np.ndarray,
    records: Sequence[dict],
    draws: int,
    rng: np.random.Generator,
    bounds: dict[str, list[float | None]] | None = None,
    quantiles: np.ndarray | None = None,
) -> dict:
    """The figures of one prompt: the exact ones with their bounds (`bounds` from a partial walk, where
    `model_probs` is its reported completion; None: a full walk, whose figures are their own bounds), and the
    structured samples set against the exact distribution. `quantiles`: the law's for the exact W1, when
    computed already."""
    law = family(prompt.family).law(prompt.params)
    scale = w1_scale(law)
    kl = exact_kl(target_probs, model_probs)
    w1 = exact_wasserstein1(values, model_probs, law, quantiles=quantiles)
    figures = {"mass": kl["mass"], "w1": w1, "kl_on_space": kl["on_space"], "kl_sequences": kl["sequences"]}
    if bounds is None:
        bounds = {name: [finite_or_none(value)] * 2 for name, value in figures.items()}
    bounds = {**bounds, "w1_norm": [None if side is None else _normalized(side, scale) for side in bounds["w1"]]}

    valid = np.array([r["value"] for r in records if r["valid"]], dtype=np.float64)
    on_space = values[on_space_indices(records, strings)]
    sampled_norm = _normalized(wasserstein1(valid, law), scale)
    on_space_norm = _normalized(wasserstein1(on_space, law), scale)
    sampled_spread = _spread(values, model_probs, law, len(valid), draws, rng, scale)
    on_space_spread = _spread(values, model_probs, law, len(on_space), draws, rng, scale)
    within = None
    if on_space_norm is not None and on_space_spread is not None:
        within = on_space_spread[0] <= on_space_norm <= on_space_spread[1]
    return {
        "id": prompt.id,
        "family": prompt.family,
        "params": dict(prompt.params),
        "mass": kl["mass"],
        "kl_on_space": finite_or_none(kl["on_space"]),
        "kl_sequences": finite_or_none(kl["sequences"]),
        "w1": finite_or_none(w1),
        "w1_scale": scale,
        "w1_norm": _normalized(w1, scale),
        "sampled": {"samples": len(records), "valid": len(valid), "w1_norm": sampled_norm, "spread": sampled_spread},
        "on_space": {"samples": len(on_space), "w1_norm": on_space_norm, "spread": on_space_spread, "within": within},
        "bounds": bounds,
    }


BOUNDED = ("w1_norm", "kl_on_space", "kl_sequences", "mass")  # the aggregates that get bounds


def aggregate_bounds(rows: Sequence[dict], kl_across_families: str = "mean") -> dict[str, list[float | None]]:
    """[lowest, highest] of each aggregate: the aggregate of the prompts' lower and of their upper bounds (means
    and medians grow with each of their values), over the prompts that have a value; the upper one None where one
    of those prompts has none."""
    sides = [
        exact_aggregate(
            [{**row, **{k: None if row[k] is None else row["bounds"][k][side] for k in BOUNDED}} for row in rows],
            kl_across_families,
        )
        for side in (0, 1)
    ]
    unbounded = {k: any(row[k] is not None and row["bounds"][k][1] is None for row in rows) for k in BOUNDED}
    return {k: [sides[0][k], None if unbounded[k] else sides[1][k]] for k in BOUNDED}


def score(rows: Sequence[dict], kl_across_families: str = "mean", **header) -> dict:
    """metrics.json from the per-prompt rows: per family (means) and aggregate (`exact_aggregate`), and how many
    prompts' on-space sampled W1 lies within its spread."""
    aggregate = exact_aggregate(rows, kl_across_families)
    means = aggregate.pop("family_means")
    families = family_rows(means, [row["family"] for row in rows])
    verdicts = [row["on_space"]["within"] for row in rows if row["on_space"]["within"] is not None]
    within = {
        "prompts": len(verdicts),
        "within": int(sum(verdicts)),
        "fraction": sum(verdicts) / len(verdicts) if verdicts else None,
    }
    return {
        **header,
        "aggregate": {
            **aggregate,
            "bounds": aggregate_bounds(rows, kl_across_families),
            "within_spread": within,
            "num_families": len(families),
            "undefined_families": undefined_families(means["w1_norm"]),
        },
        "families": families,
        "prompts": list(rows),
    }
