"""The summaries of a TinyBenchmarks job, from item scores alone (docs/tinybench.md, Outputs): a task's
scores.json (`summarize`), and summary.json's gp-IRT figures per row of `GPIRT_ROWS` with their bootstrap
intervals over resamples of each task's items (`gpirt_summary`, `item_picks`, `row_draws`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from calibft.core.seeds import seed_for
from calibft.evals.bootstrap import REPLICATES, interval_block, resample_indices
from calibft.evals.tinybench import gpirt
from calibft.evals.tinybench.tasks import task_spec

# The rows of summary.json: a task's gp-IRT from one of its metrics; GSM8K twice, strict and flexible, as the paper
# reports both (tab:retention-summary), from the same IRT scenario.
GPIRT_ROWS: dict[str, tuple[str, str]] = {
    "mmlu": ("mmlu", "acc"),
    "hellaswag": ("hellaswag", "acc_norm"),
    "truthfulqa": ("truthfulqa", "mc2"),
    "winogrande": ("winogrande", "acc"),
    "gsm8k_strict": ("gsm8k", "strict"),
    "gsm8k_flexible": ("gsm8k", "flexible"),
}


def summarize(task: str, records: Sequence[Mapping], **header) -> dict:
    """scores.json from the item records alone: the item scores in row order, their mean, and every metric."""
    spec = task_spec(task)
    records = sorted(records, key=lambda r: r["index"])
    if [r["index"] for r in records] != list(range(len(records))):
        raise ValueError("item records must have the indices 0..n-1, one each")

    def column(name: str) -> dict:
        values = [float(r[name]) for r in records]
        return {"scores": values, "accuracy": float(np.mean(values)) if values else None}

    metrics = {name: column(name) for name in spec.metrics}
    return {
        **header,
        "task": task,
        "score_metric": spec.metrics[0],
        "scores": column("score")["scores"],
        "accuracy": column("score")["accuracy"],
        "metrics": metrics,
        "num_items": len(records),
    }


def item_picks(seed: int, task: str, n: int, replicates: int) -> np.ndarray:
    """[replicates, n]: the bootstrap resamples of a task's items, seeded by the run's seed and the task alone, so
    that every model and condition (and GSM8K's strict and flexible rows) resample the same items alike."""
    rng = np.random.default_rng(seed_for(seed, "bootstrap", "tinybench", task))
    return resample_indices(rng, n, replicates)


def row_draws(scenario: gpirt.Scenario, scores: Sequence[float], picks: np.ndarray, row: str) -> dict[str, np.ndarray]:
    """[replicates] of a row's irt, pirt, gp-IRT and accuracy over the resamples `picks` of its items."""
    estimates = gpirt.resampled_estimates(scenario, scores, picks)
    accuracy = np.asarray(scores, dtype=np.float64)[picks].mean(axis=1)
    return {f"tasks/{row}/{key}": values for key, values in {**estimates, "accuracy": accuracy}.items()}


def gpirt_summary(params: Mapping, summaries: Mapping[str, Mapping], seed: int, replicates: int = REPLICATES) -> dict:
    """summary.json's figures: per row of `GPIRT_ROWS` whose task was scored (`summaries[task]`, scores.json) its
    irt, pirt, gp-IRT and accuracy, and `mean_gpirt` over the rows; with `replicates`, `intervals` of every
    figure (keys `tasks/<row>/<figure>`, `mean_gpirt`) over resamples of each task's items (`item_picks`),
    the replicate of the mean the mean of the rows' replicates, each row's gp-IRT replicates kept (`draws`).
    Each replicate refits the IRT ability (`gpirt.resampled_estimates`): the cost grows with `replicates`."""
    tasks, draws, picks, units = {}, {}, {}, {}
    for row, (task, metric) in GPIRT_ROWS.items():
        if task not in summaries:
            continue
        column, scenario = summaries[task]["metrics"][metric], gpirt.scenario_data(params, task)
        scores = column["scores"]
        tasks[row] = {**gpirt.estimate_scenario(scenario, scores), "accuracy": column["accuracy"]}
        if replicates:
            units[task] = len(scores)
            picks.setdefault(task, item_picks(seed, task, len(scores), replicates))
            draws.update(row_draws(scenario, scores, picks[task], row))
    summary = {"tasks": tasks, "mean_gpirt": float(np.mean([t["gpirt"] for t in tasks.values()]))}
    if replicates:
        gpirt_keys = [f"tasks/{row}/gpirt" for row in tasks]
        draws["mean_gpirt"] = np.mean([draws[key] for key in gpirt_keys], axis=0)
        resampled = "items within each task"
        summary["intervals"] = interval_block(draws, seed, resampled, kept=gpirt_keys, units=units)
    return summary
