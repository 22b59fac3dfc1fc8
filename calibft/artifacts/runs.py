"""What every table and figure does with the runs it reads: `runs[model][condition]` mappings (a metrics.json or
summary.json each, `calibft.core.io.read_runs`), their models and conditions in order, their numbers as floats
(`number`; TOLERANCE: how far a stored number may be from a renderer's recomputation of it), models × conditions
frames of their values (`aggregates` of one split's runs, `value_frame` of any cell), their bootstrap intervals
(a run's own, or a mean's over models from the runs' paired replicates), and what a table or figure prints for its
models and conditions (`Titles`: their titles, the conditions shown, the caption's sentence on each condition)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from calibft.core.io import read_runs
from calibft.evals.bootstrap import paired_draws, percentile_interval

Runs = Mapping[str, Mapping[str, Any]]  # model -> condition -> one run's JSON
SPLITS = ("ood", "unseen")  # the splits of the structured-sampling evaluations, in the order they are shown
TOLERANCE = 1e-9  # relative: how far a stored number may be from its recomputation
CONDITION_TEXT = {
    "base": "denotes the original checkpoint",
    "soft": "the soft-target Calibration Fine-Tuning checkpoint",
    "hard": "the hard-target Calibration Fine-Tuning checkpoint",
    "ssot": "the String Seed of Thought prompting baseline",
}


def number(value: Any) -> float:
    """A stored value as a float; NaN where it is undefined (None) or not finite."""
    if value is None:
        return math.nan
    value = float(value)
    return value if math.isfinite(value) else math.nan


def value_frame(rows: Sequence[str], conditions: Sequence[str], cell: Callable[[str, str], float]) -> pd.DataFrame:
    """rows × conditions of `cell(row, condition)`, as floats (NaN where undefined)."""
    return pd.DataFrame(
        [[cell(r, c) for c in conditions] for r in rows], index=list(rows), columns=list(conditions), dtype=float
    )


Interval = list[float] | None  # [low, high], or None where a cell has none


def interval_frame(
    rows: Sequence[str], conditions: Sequence[str], cell: Callable[[str, str], Interval]
) -> pd.DataFrame:
    """rows × conditions of `cell(row, condition)`: an interval or None, as `Table.intervals` holds them."""
    cells = [[cell(r, c) for c in conditions] for r in rows]
    return pd.DataFrame(cells, index=list(rows), columns=list(conditions), dtype=object)


def run_interval(runs: Runs, model: str, condition: str, key: str) -> Interval:
    """The interval of `key` in the run's `intervals` (its JSON's); None where not run or without one."""
    run = runs.get(model, {}).get(condition)
    return None if run is None else (run.get("intervals") or {}).get(key)


def run_intervals(runs: Runs, models: Sequence[str], conditions: Sequence[str], key: str) -> pd.DataFrame:
    """models × conditions: each run's interval of `key` (`run_interval`)."""
    return interval_frame(models, conditions, lambda m, c: run_interval(runs, m, c, key))


def mean_interval(runs: Runs, models: Sequence[str], condition: str, key: str) -> Interval:
    """The interval of the mean over `models` of `key` in `condition`: replicate i of the mean is the mean of
    replicate i of every model's run (`calibft.evals.bootstrap.paired_draws`: the runs resampled the same
    units alike); None where a model lacks the run or its replicates, or the runs' replicates do not pair."""
    blocks = [(runs.get(m, {}).get(condition) or {}).get("intervals") for m in models]
    draws = paired_draws(blocks, key)
    return None if draws is None else percentile_interval(draws.mean(axis=0), blocks[0]["level"])


def check_run(run: Mapping[str, Any], split: str, evaluation: str, where: str) -> Mapping[str, Any]:
    """The run itself, after making sure that it is the split and evaluation the caller asked for: a run of the
    other split in the wrong slot would otherwise print plausible but wrong numbers."""
    if run.get("split") != split or run.get("evaluation") != evaluation:
        raise ValueError(
            f"{where}: expected a {evaluation!r} evaluation of split {split!r}, "
            f"got {run.get('evaluation')!r} of {run.get('split')!r}"
        )
    return run


def _per_run(
    metrics: Runs,
    split: str,
    conditions: Sequence[str],
    evaluation: str,
    read: Callable[[Mapping[str, Any]], Any],
    missing: Any,
    dtype: type,
) -> pd.DataFrame:
    """models × conditions: `read` of each run (checked to be `evaluation` of `split`), `missing` where not run."""
    rows = {}
    for model, runs in metrics.items():
        checked = {
            c: check_run(runs[c], split, evaluation, f"{model}/{c}") for c in conditions if runs.get(c) is not None
        }
        rows[model] = [read(checked[c]) if c in checked else missing for c in conditions]
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(conditions), dtype=dtype)


def aggregates(
    metrics: Runs, key: str, split: str, conditions: Sequence[str], evaluation: str = "structured"
) -> pd.DataFrame:
    """models × conditions: the aggregate `key` of each run; NaN where undefined or not run."""
    return _per_run(metrics, split, conditions, evaluation, lambda run: number(run["aggregate"][key]), math.nan, float)


def aggregate_intervals(
    metrics: Runs, key: str, split: str, conditions: Sequence[str], evaluation: str = "structured"
) -> pd.DataFrame:
    """models × conditions: the bootstrap interval [low, high] of each run's aggregate `key` (metrics.json's
    `intervals`); None where the run has none or was not run."""
    return _per_run(metrics, split, conditions, evaluation, lambda run: run.get("intervals", {}).get(key), None, object)


def aggregate_bounds(
    metrics: Runs, key: str, split: str, conditions: Sequence[str], evaluation: str = "exact"
) -> pd.DataFrame:
    """models × conditions: the certified bounds [low, high] of each run's aggregate `key` (metrics.json's
    `aggregate.bounds`, high None where unbounded); None where the run has none or was not run."""
    return _per_run(
        metrics, split, conditions, evaluation, lambda run: run["aggregate"].get("bounds", {}).get(key), None, object
    )


def first_seen(*mappings: Mapping[str, Any]) -> list[str]:
    """The keys of the mappings (the models of some runs), in order of first appearance."""
    return list(dict.fromkeys(key for mapping in mappings for key in mapping))


@dataclass(frozen=True)
class Titles:
    """What a table or figure prints for each model and condition, and the conditions it shows, in order (None:
    every condition of the runs it reads, in order of first appearance)."""

    model_titles: Mapping[str, str]
    condition_titles: Mapping[str, str]
    conditions: tuple[str, ...] | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any], conditions: Sequence[str] | None = None) -> Titles:
        """The titles of a renderer's settings, showing `conditions` (None: every condition of the runs)."""
        shown = None if conditions is None else tuple(conditions)
        return cls(settings["model_titles"], settings["condition_titles"], shown)

    def model(self, model: str) -> str:
        return self.model_titles.get(model, model)

    def condition(self, condition: str) -> str:
        return self.condition_titles.get(condition, condition)

    def shown(self, *runs: Runs) -> list[str]:
        """The conditions to show: the given ones, or every condition of any model of `runs`, in order of first
        appearance."""
        if self.conditions is not None:
            return list(self.conditions)
        return list(dict.fromkeys(c for mapping in runs for model_runs in mapping.values() for c in model_runs))

    def sentence(self, conditions: Sequence[str]) -> str:
        """`Base denotes the original checkpoint, Soft the soft-target ..., and Hard the hard-target ....`"""
        parts = [f"{self.condition(c)} {CONDITION_TEXT.get(c, f'the {c} checkpoint')}" for c in conditions]
        return join_words(parts) + "." if parts else ""


def read_runs_by_split(
    paths: Sequence[str], splits: Sequence[str], runs: Sequence[Sequence[str]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """{split: runs} from the files of every run, split after split (as the workflow lists them)."""
    if len(paths) != len(splits) * len(runs):
        raise ValueError(f"{len(paths)} files for {len(splits)} splits of {len(runs)} runs")
    return {split: read_runs(paths[i * len(runs) : (i + 1) * len(runs)], runs) for i, split in enumerate(splits)}


def join_words(parts: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b, and c`."""
    if len(parts) <= 2:
        return " and ".join(parts)
    return ", ".join(parts[:-1]) + ", and " + parts[-1]
