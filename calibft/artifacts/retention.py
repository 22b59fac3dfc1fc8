"""Capability retention as the paper shows it: TinyBenchmarks gp-IRT next to PALOMA perplexity
(tab:retention-transfer-summary), the TinyBenchmarks breakdown per model and per task (tab:retention-summary,
fig:appendix-retention-gpirt-per-task) and PALOMA per model and per slice (tab:paloma-model-summary,
tab:paloma-slice-summary, fig:appendix-paloma-perplexity, fig:appendix-paloma-bpb).

Inputs are plain dicts, loaded by the caller and ordered as the tables show them (models, then conditions):

- `tinybench[model][condition]`: a TinyBenchmarks summary.json, {"model", "condition", "tasks": {task: {"irt",
  "pirt", "gpirt", "accuracy"}}, "mean_gpirt"} for the configured tasks among TASK_TITLES. The tables always show
  the tasks in the paper's order (MMLU, HellaSwag, TruthfulQA, WinoGrande, GSM8K strict and flexible), whatever
  the file's order.
- `paloma[model][condition]`: a PALOMA summary.json, {"slices": {slice: {"nll", "tokens", "bytes",
  "documents", "perplexity", "bits_per_byte"}}, "pooled": {the same keys}} for the configured slices among
  SLICE_TITLES, shown in the paper's order.

Every number is recomputed from what it rests on, and a stored value that disagrees raises ValueError: the mean
gp-IRT is the mean of the per-task gp-IRT; perplexity = exp(nll / tokens) and bits per byte = nll / (ln 2 ·
bytes) of each slice's totals; the pooled totals are the sums of the slice totals (so a slice weighs by its
tokens and bytes), and the pooled metrics come from those sums. Runs that cover different tasks (slices) raise
as well, since their means (pooled totals) would not be comparable.

Model and slice averages (tab:retention-summary's task rows, tab:paloma-slice-summary) are plain means over
every model of the input, of the per-model values (perplexities, not NLLs: tokenizers differ); one missing
model makes the mean undefined. Undefined values and runs that do not exist print as "---" and show as hatched
bars. Bold: the best value of each metric per row (highest gp-IRT, lowest perplexity and bits per byte) as
printed, every tied cell.

Intervals (`Table.intervals`): a run's cell takes the run's bootstrap interval (summary.json's `intervals`:
`mean_gpirt`, `pooled/perplexity`, `pooled/bits_per_byte`); a mean over models takes the percentile interval
of the mean of the models' replicates i (`calibft.artifacts.runs.mean_interval`: every model resampled the
same items or documents alike), None where a model lacks them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from calibft.artifacts.figures import UNDEFINED_HATCH, bar_panels, condition_colors, grouped_bars, panel_label_rotation
from calibft.artifacts.formats import count_words, format_fixed, format_three
from calibft.artifacts.runs import (
    TOLERANCE,
    Titles,
    first_seen,
    interval_frame,
    join_words,
    mean_interval,
    number,
    run_intervals,
    value_frame,
)
from calibft.artifacts.tables import Table, grouped_table
from calibft.core.checks import check_choice
from calibft.core.io import read_runs

Runs = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model -> condition -> summary.json

# The paper's order and names (tab:retention-summary, tab:paloma-slice-summary).
TASK_TITLES = {
    "mmlu": "MMLU",
    "hellaswag": "HellaSwag",
    "truthfulqa": "TruthfulQA",
    "winogrande": "WinoGrande",
    "gsm8k_strict": "GSM8K Strict",
    "gsm8k_flexible": "GSM8K Flex",
}
SLICE_TITLES = {
    "wikitext_103": "WikiText-103",
    "c4_en": "C4",
    "dolma-v1_5": "Dolma",
    "mc4": "mC4",
    "ptb": "PTB",
    "redpajama": "RedPajama",
    "falcon-refinedweb": "RefinedWeb",
}
METRICS = ("perplexity", "bits_per_byte")
GPIRT_GROUP = "TinyBenchmarks gp-IRT ↑"
METRIC_GROUPS = {"perplexity": "PALOMA Perplexity ↓", "bits_per_byte": "PALOMA Bits per Byte ↓"}
METRIC_LABELS = {"perplexity": "perplexity", "bits_per_byte": "bits per byte"}
LOG_RANGE = 10.0  # a perplexity figure whose largest value is this many times its smallest gets a log axis


# ---------------------------------------------------------------------------------------------- formats


def format_perplexity(value: float) -> str:
    """Perplexity: two decimals, trailing zeros dropped (`19.73`, `15.5`, `12`), never scientific."""
    return format_fixed(value, 2)


METRIC_FORMATS: dict[str, Callable[[float], str]] = {"perplexity": format_perplexity, "bits_per_byte": format_three}


# ---------------------------------------------------------------------------------------------- checks


def _agrees(stored: Any, recomputed: float) -> bool:
    """Whether a stored value is the recomputed one within 1e-9 relative; both undefined also agree."""
    stored = number(stored)
    if math.isnan(stored) or math.isnan(recomputed):
        return math.isnan(stored) and math.isnan(recomputed)
    return math.isclose(stored, recomputed, rel_tol=TOLERANCE, abs_tol=1e-12)


def _check_slot(run: Mapping[str, Any], model: str, condition: str, where: str) -> None:
    """A run in the wrong slot would print plausible but wrong numbers: its own model and condition, when it
    names them, must be the slot's."""
    for key, expected in (("model", model), ("condition", condition)):
        if run.get(key) is not None and run[key] != expected:
            raise ValueError(f"{where}: the file is of {key} {run[key]!r}, not {expected!r}")


def _slot_numbers(
    runs: Runs, models: Sequence[str], conditions: Sequence[str], read: Callable[[Mapping, str], Any], what: str
) -> dict[tuple[str, str], Any]:
    """`read(run, where)` of every (model, condition) that was run, each run checked to belong to its slot."""
    numbers = {(m, c): read(runs[m][c], f"{what} {m}/{c}") for m in models for c in conditions if c in runs.get(m, {})}
    for m, c in numbers:
        _check_slot(runs[m][c], m, c, f"{what} {m}/{c}")
    return numbers


def _ordered(names: Sequence[str], titles: Mapping[str, str], what: str, where: str) -> list[str]:
    unknown = [name for name in names if name not in titles]
    if unknown:
        raise ValueError(f"{where}: unknown {what} {unknown}; expected some of {', '.join(titles)}")
    return [name for name in titles if name in names]


def _same_names(names: Mapping[tuple[str, str], Sequence[str]], what: str) -> list[str]:
    """The one list of tasks (slices) of all runs; ValueError when runs differ."""
    distinct = {tuple(found) for found in names.values()}
    if len(distinct) > 1:
        described = "; ".join(f"{m}/{c}: {', '.join(found) or 'none'}" for (m, c), found in names.items())
        raise ValueError(f"the runs cover different {what}, so their aggregates are not comparable ({described})")
    return list(distinct.pop()) if distinct else []


# ---------------------------------------------------------------------------------------------- data


def gpirt_numbers(run: Mapping[str, Any], where: str = "tinybench") -> tuple[dict[str, float], float]:
    """({task: gp-IRT} in the paper's task order, their mean) of one TinyBenchmarks summary.json; NaN where
    undefined. The mean is recomputed from the tasks; a stored `mean_gpirt` that disagrees raises ValueError, as
    do unknown tasks."""
    tasks = run.get("tasks") or {}
    if not tasks:
        raise ValueError(f"{where}: no tasks")
    scores = {task: number(tasks[task]["gpirt"]) for task in _ordered(list(tasks), TASK_TITLES, "tasks", where)}
    mean = float(np.mean(list(scores.values())))
    if not _agrees(run.get("mean_gpirt"), mean):
        raise ValueError(f"{where}: mean_gpirt {run.get('mean_gpirt')!r} is not the mean of its tasks ({mean})")
    return scores, mean


def _totals_metrics(totals: Mapping[str, Any], where: str) -> dict[str, float]:
    """Perplexity and bits per byte recomputed from the totals (NaN without tokens / bytes), after checking the
    stored ones against them."""
    nll, tokens, n_bytes = float(totals["nll"]), int(totals["tokens"]), int(totals["bytes"])
    recomputed = {
        "perplexity": math.exp(nll / tokens) if tokens else math.nan,
        "bits_per_byte": nll / (math.log(2) * n_bytes) if n_bytes else math.nan,
    }
    for key, value in recomputed.items():
        if not _agrees(totals.get(key), value):
            raise ValueError(f"{where}: {key} {totals.get(key)!r}, but {value} from its nll, tokens and bytes")
    return recomputed


def paloma_numbers(run: Mapping[str, Any], where: str = "paloma") -> dict[str, Any]:
    """{"slices": {slice: {"perplexity", "bits_per_byte"}} in the paper's slice order, "pooled": {the same}} of
    one PALOMA summary.json, every value recomputed from the totals (NaN where a slice has no tokens / bytes).
    The pooled totals must be the sums of the slice totals; any stored value that disagrees raises ValueError."""
    if run.get("evaluation", "paloma") != "paloma":
        raise ValueError(f"{where}: expected a paloma evaluation, got {run.get('evaluation')!r}")
    slices = run.get("slices") or {}
    if not slices:
        raise ValueError(f"{where}: no slices")
    names = _ordered(list(slices), SLICE_TITLES, "slices", where)
    per_slice = {name: _totals_metrics(slices[name], f"{where}/{name}") for name in names}
    pooled = run["pooled"]
    nll = math.fsum(float(slices[name]["nll"]) for name in names)
    if not _agrees(pooled["nll"], nll):
        raise ValueError(f"{where}/pooled: nll {pooled['nll']!r} is not the sum of the slices' ({nll})")
    counts = ["tokens", "bytes"]
    if all("documents" in totals for totals in (pooled, *slices.values())):
        counts.append("documents")
    for key in counts:
        total = sum(int(slices[name][key]) for name in names)
        if int(pooled[key]) != total:
            raise ValueError(f"{where}/pooled: {key} {pooled[key]!r} is not the sum of the slices' ({total})")
    pooled_sums = {
        "nll": nll,
        "tokens": int(pooled["tokens"]),
        "bytes": int(pooled["bytes"]),
        **{key: pooled.get(key) for key in METRICS},
    }
    return {"slices": per_slice, "pooled": _totals_metrics(pooled_sums, f"{where}/pooled")}


@dataclasses.dataclass(frozen=True)
class _Gpirt:
    tasks: list[str]
    per_task: dict[str, pd.DataFrame]  # task -> models × conditions
    mean: pd.DataFrame  # models × conditions


def _gpirt(tinybench: Runs, models: Sequence[str], conditions: Sequence[str]) -> _Gpirt:
    numbers = _slot_numbers(tinybench, models, conditions, gpirt_numbers, "tinybench")
    tasks = _same_names({key: list(scores) for key, (scores, _) in numbers.items()}, "TinyBenchmarks tasks")
    nan = ({}, math.nan)
    per_task = {
        task: value_frame(models, conditions, lambda m, c, task=task: numbers.get((m, c), nan)[0].get(task, math.nan))
        for task in tasks
    }
    mean = value_frame(models, conditions, lambda m, c: numbers.get((m, c), nan)[1])
    return _Gpirt(tasks, per_task, mean)


@dataclasses.dataclass(frozen=True)
class _Paloma:
    slices: list[str]
    per_slice: dict[str, dict[str, pd.DataFrame]]  # metric -> slice -> models × conditions
    pooled: dict[str, pd.DataFrame]  # metric -> models × conditions


def _paloma(paloma: Runs, models: Sequence[str], conditions: Sequence[str]) -> _Paloma:
    numbers = _slot_numbers(paloma, models, conditions, paloma_numbers, "paloma")
    slices = _same_names({key: list(run["slices"]) for key, run in numbers.items()}, "PALOMA slices")

    def value(m: str, c: str, metric: str, name: str | None) -> float:
        run = numbers.get((m, c))
        if run is None:
            return math.nan
        return (run["pooled"] if name is None else run["slices"][name])[metric]

    per_slice = {
        metric: {
            name: value_frame(models, conditions, lambda m, c, metric=metric, name=name: value(m, c, metric, name))
            for name in slices
        }
        for metric in METRICS
    }
    pooled = {
        metric: value_frame(models, conditions, lambda m, c, metric=metric: value(m, c, metric, None))
        for metric in METRICS
    }
    return _Paloma(slices, per_slice, pooled)


def _mean_intervals(
    runs: Runs, models: Sequence[str], conditions: Sequence[str], keys: Mapping[str, str], row_titles: Mapping[str, str]
) -> pd.DataFrame:
    """names × conditions, like `_mean_over_models`: the interval of each name's mean over `models` of the key
    `keys[name]` of the runs' intervals (`mean_interval`), the rows titled by `row_titles`."""
    return interval_frame(list(keys), conditions, lambda n, c: mean_interval(runs, models, c, keys[n])).rename(
        index=row_titles
    )


def _mean_over_models(frames: Mapping[str, pd.DataFrame], titles: Mapping[str, str]) -> pd.DataFrame:
    """names × conditions: for each name's models × conditions frame, the mean over all its models (NaN when one
    is missing: a mean over fewer models would not compare with the other conditions')."""
    return pd.DataFrame(
        {titles[name]: frame.mean(axis=0, skipna=False) for name, frame in frames.items()}, dtype=float
    ).T


# ---------------------------------------------------------------------------------------------- text


def _the_models(n: int) -> str:
    """`the one evaluated model`, `both evaluated models`, `all twelve evaluated models`."""
    return {1: "the one evaluated model", 2: "both evaluated models"}.get(n, f"all {count_words(n)} evaluated models")


def _with_first_column(table: Table, title: str, shaded: Sequence[bool] | None = None) -> Table:
    """The table with its first column ("Model" from grouped_table) renamed to `title`."""

    def rename(frame: pd.DataFrame | None) -> pd.DataFrame | None:
        return None if frame is None else frame.rename(columns={"Model": title}, level=1)

    renamed = {name: rename(getattr(table, name)) for name in ("frame", "bold", "intervals")}
    return dataclasses.replace(table, **renamed, shaded=shaded)


# ---------------------------------------------------------------------------------------------- tables


def retention_transfer_table(
    tinybench: Runs,
    paloma: Runs,
    titles: Titles,
) -> Table:
    """tab:retention-transfer-summary (`retention_transfer_summary`): per model, the mean TinyBenchmarks gp-IRT
    (bold: highest) and the pooled PALOMA perplexity (bold: lowest) of each condition. Rows: every model of
    either input, in order of first appearance; "---" where a run is missing."""
    models = first_seen(tinybench, paloma)
    conditions = titles.shown(tinybench, paloma)
    gpirt = _gpirt(tinybench, models, conditions)
    pal = _paloma(paloma, models, conditions)
    tasks = join_words([TASK_TITLES[t] for t in gpirt.tasks]) or "TinyBenchmarks tasks"
    caption = (
        f"Retention summary. TinyBenchmarks gp-IRT (the mean over {tasks}) measures downstream retention; "
        f"PALOMA perplexity (over the {count_words(len(pal.slices))} evaluation slices pooled) measures held-out "
        f"language-model fit. {titles.sentence(conditions)} Bold denotes the best value for "
        "each metric; --- marks a missing run."
    )
    groups = [
        (GPIRT_GROUP, gpirt.mean, format_three, False),
        (METRIC_GROUPS["perplexity"], pal.pooled["perplexity"], format_perplexity, True),
    ]
    intervals = {
        GPIRT_GROUP: run_intervals(tinybench, models, conditions, "mean_gpirt"),
        METRIC_GROUPS["perplexity"]: run_intervals(paloma, models, conditions, "pooled/perplexity"),
    }
    label = "tab:retention-transfer-summary"
    return grouped_table(groups, titles, label, caption, intervals)


def retention_table(
    tinybench: Runs,
    titles: Titles,
) -> Table:
    """tab:retention-summary (`retention_summary`): the paper's two panels stacked in one table. First one row
    per model, its gp-IRT averaged across the tasks; then one shaded row per task (in the paper's order), its
    gp-IRT averaged across all models ("---" when a model lacks it). Bold: the highest value of each row."""
    models = list(tinybench)
    conditions = titles.shown(tinybench)
    gpirt = _gpirt(tinybench, models, conditions)
    per_model = gpirt.mean.rename(index=lambda m: titles.model(m))
    per_task = _mean_over_models(gpirt.per_task, TASK_TITLES).reindex(columns=conditions)
    clash = set(per_model.index) & set(per_task.index)
    if clash:
        raise ValueError(f"tab:retention-summary: models titled like tasks {sorted(clash)}")
    values = pd.concat([per_model, per_task])
    task_keys = {task: f"tasks/{task}/gpirt" for task in gpirt.tasks}
    spans = pd.concat(
        [
            run_intervals(tinybench, models, conditions, "mean_gpirt"),
            _mean_intervals(tinybench, models, conditions, task_keys, TASK_TITLES),
        ]
    )
    caption = (
        "Retention results measured by TinyBenchmarks aggregate gp-IRT. The upper rows report one row per model, "
        f"averaging across the {count_words(len(gpirt.tasks))} TinyBenchmarks tasks; the shaded lower rows "
        f"report one row per task, averaging across {_the_models(len(models))}. Higher is "
        f"better throughout. {titles.sentence(conditions)} Bold denotes the best value in "
        "each row; --- marks a missing run."
    )
    groups = [(GPIRT_GROUP, values, format_three, False)]
    rows_titled = dataclasses.replace(titles, model_titles={})  # the rows carry their titles already
    table = grouped_table(groups, rows_titled, "tab:retention-summary", caption, {GPIRT_GROUP: spans})
    shaded = [False] * len(per_model) + [True] * len(per_task)
    return _with_first_column(dataclasses.replace(table, wide=False), "Model / Task", shaded)


def paloma_model_table(
    paloma: Runs,
    titles: Titles,
) -> Table:
    """tab:paloma-model-summary (`paloma_model_summary`): per model, the pooled PALOMA perplexity and bits per
    byte of each condition (the paper's panels (a) and (b) as two column groups). Bold: the lowest of each metric
    per model."""
    models = list(paloma)
    conditions = titles.shown(paloma)
    pal = _paloma(paloma, models, conditions)
    caption = (
        "PALOMA aggregate results by model. Each row corresponds to one model and aggregates over the "
        f"{count_words(len(pal.slices))} PALOMA evaluation slices: perplexity and bits per byte of the summed "
        "token negative log-likelihood, scored tokens and bytes. Lower is better for both metrics. "
        f"{titles.sentence(conditions)} Bold values denote the best reported result for "
        "each metric; --- marks a missing run."
    )
    groups = [(METRIC_GROUPS[m], pal.pooled[m], METRIC_FORMATS[m], True) for m in METRICS]
    intervals = {METRIC_GROUPS[m]: run_intervals(paloma, models, conditions, f"pooled/{m}") for m in METRICS}
    return grouped_table(groups, titles, "tab:paloma-model-summary", caption, intervals)


def paloma_slice_table(
    paloma: Runs,
    titles: Titles,
) -> Table:
    """tab:paloma-slice-summary (`paloma_slice_summary`): per slice (in the paper's order), the mean across all
    models of each condition's perplexity and bits per byte of that slice (the mean of the per-model values;
    "---" when a model lacks the run). Bold: the lowest of each metric per slice."""
    models = list(paloma)
    conditions = titles.shown(paloma)
    pal = _paloma(paloma, models, conditions)
    groups = [
        (METRIC_GROUPS[m], _mean_over_models(pal.per_slice[m], SLICE_TITLES), METRIC_FORMATS[m], True) for m in METRICS
    ]
    caption = (
        "PALOMA slice-level summary averaged across all evaluated models. Each row corresponds to one PALOMA "
        f"evaluation slice, and values are the mean across {_the_models(len(models))} for each "
        "condition (the mean of the per-model perplexities and bits per byte of that slice). Lower is better for "
        f"both metrics. {titles.sentence(conditions)} Bold values denote the best reported "
        "result for each metric; --- marks a mean with a missing run."
    )
    intervals = {
        METRIC_GROUPS[m]: _mean_intervals(
            paloma, models, conditions, {name: f"slices/{name}/{m}" for name in pal.slices}, SLICE_TITLES
        )
        for m in METRICS
    }
    rows_titled = dataclasses.replace(titles, model_titles={})  # the rows are slices, titled already
    table = grouped_table(groups, rows_titled, "tab:paloma-slice-summary", caption, intervals)
    return _with_first_column(table, "Slice")


# ---------------------------------------------------------------------------------------------- figures


def _panel_limits(values: np.ndarray, log: bool, top: float | None = None) -> tuple[float, float]:
    """(bottom, top) of one panel: 0 to 12% above the largest value (at least `top`) on a linear axis; on a
    log axis from a little below the smallest positive value to 30% above the largest."""
    finite = values[np.isfinite(values)]
    if log:
        positive = finite[finite > 0]
        if positive.size == 0:
            return 1.0, 10.0
        return float(positive.min()) / 1.6, float(positive.max()) * 1.3
    largest = float(finite.max()) if finite.size else 1.0
    return 0.0, max(largest * 1.12 if largest > 0 else 1.0, top or 0.0)


def _panel_figure(
    panels: Mapping[str, np.ndarray],
    models: Sequence[str],
    conditions: Sequence[str],
    titles: Titles,
    ylabel: str,
    log: bool,
    top: float | None = None,
):
    """One panel per entry of `panels` (title -> models × conditions), grouped bars per model; model names
    label the bottom panel of each column; one legend above."""
    if not panels:
        raise ValueError("no panels to draw")
    colors = condition_colors(conditions)
    many = len(models) * len(conditions) > 12
    columns = min(len(panels), 2 if many else 3)
    labels = [titles.model(m) for m in models]
    figure, axes = bar_panels(len(panels), columns, labels, len(conditions))
    any_missing = False
    for i, (ax, (title, values)) in enumerate(zip(axes, panels.items(), strict=True)):
        any_missing |= bool((~np.isfinite(values)).any())
        bottom, ceiling = _panel_limits(values, log, top)
        grouped_bars(
            ax,
            values,
            [colors[c] for c in conditions],
            labels,
            bottom=bottom,
            ceiling=ceiling,
            log=log,
            rotation=panel_label_rotation(labels),
            show_labels=i + columns >= len(panels),
        )
        ax.set_title(title, fontsize=8)
        if i % columns == 0:
            ax.set_ylabel(ylabel, fontsize=8)
    handles: list = [Patch(facecolor=colors[c], label=titles.condition(c)) for c in conditions]
    if any_missing:
        handles.append(Patch(fill=False, hatch=UNDEFINED_HATCH, edgecolor="#555555", label="missing"))
    figure.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return figure


def gpirt_per_task_figure(
    tinybench: Runs,
    titles: Titles,
):
    """fig:appendix-retention-gpirt-per-task (`appendix_retention_gpirt_per_task`): one panel
    per task in the paper's order, titled by the task, with one bar per condition for each model; gp-IRT on a
    linear axis from 0 to at least 1."""
    models = list(tinybench)
    conditions = titles.shown(tinybench)
    gpirt = _gpirt(tinybench, models, conditions)
    panels = {TASK_TITLES[task]: gpirt.per_task[task].to_numpy(dtype=float) for task in gpirt.tasks}
    return _panel_figure(panels, models, conditions, titles, "gp-IRT", log=False, top=1.0)


def paloma_figure(
    paloma: Runs,
    metric: str,
    titles: Titles,
):
    """fig:appendix-paloma-perplexity / fig:appendix-paloma-bpb: one panel per
    PALOMA slice in the paper's order, titled by the slice, with one bar per condition for each model. Each
    panel has its own axis; perplexity goes on log axes when its largest value is at least LOG_RANGE times its
    smallest across the figure, bits per byte always on linear axes from 0."""
    check_choice("metric", metric, METRICS)
    models = list(paloma)
    conditions = titles.shown(paloma)
    pal = _paloma(paloma, models, conditions)
    panels = {SLICE_TITLES[name]: pal.per_slice[metric][name].to_numpy(dtype=float) for name in pal.slices}
    log = False
    if metric == "perplexity":
        finite = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in panels.values()])
        log = finite.size > 0 and float(finite.max()) >= LOG_RANGE * float(finite.min())
    ylabel = METRIC_LABELS[metric] + (" (log)" if log else "")
    return _panel_figure(panels, models, conditions, titles, ylabel, log=log)


# ---------------------------------------------------------------------------------------------- renderers
# The registry's renderers (calibft.artifacts.registry): result files and settings in, a Table or Figure out.


def _read(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any], name: str) -> dict:
    return read_runs(inputs[name], settings["runs"])


def render_retention_transfer_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    tinybench, paloma = (_read(inputs, settings, name) for name in ("tinybench", "paloma"))
    return retention_transfer_table(tinybench, paloma, Titles.of(settings))


def render_retention_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return retention_table(_read(inputs, settings, "tinybench"), Titles.of(settings))


def render_paloma_model_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return paloma_model_table(_read(inputs, settings, "paloma"), Titles.of(settings))


def render_paloma_slice_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return paloma_slice_table(_read(inputs, settings, "paloma"), Titles.of(settings))


def render_gpirt_per_task_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    return gpirt_per_task_figure(_read(inputs, settings, "tinybench"), Titles.of(settings))


def render_paloma_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    return paloma_figure(_read(inputs, settings, "paloma"), settings["metric"], Titles.of(settings))
