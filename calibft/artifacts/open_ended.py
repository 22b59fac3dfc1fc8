"""The open-ended random-generation evaluation as the paper's appendix shows it: the per-prompt comparison of
each fine-tuned condition with the base checkpoint (fig:appendix-open-multi-threshold) and the empirical
answer frequencies of selected prompts (fig:appendix-open-qualitative).

The inputs are the artifacts of `calibft.evals.open_ended`: its `metrics.json` dicts, passed as
`metrics[model][condition]`, and the records of its `samples.jsonl.gz` (read with `calibft.core.io.read_jsonl`).
Every figure function returns a matplotlib Figure; the caller writes it with `save_figure`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter, PercentFormatter

from calibft.artifacts.figures import condition_colors
from calibft.artifacts.runs import Titles
from calibft.core.io import read_jsonl, read_runs

Metrics = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model -> condition -> metrics.json

FAMILY_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
SIZE_MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h", "<", ">", "p", "8")  # smallest size first
UNKNOWN_SIZE_MARKER = "X"
# "<Verb> a random <category>. Output ONLY the answer.": the panel is named by the category
PROMPT_PATTERN = re.compile(
    r"^\w+(?: of)? a random (?P<category>.+?)\. Output ONLY the answer\.$"
)  # "Think of", "Pick"
PROMPT_CHARS = 40
LABEL_CHARS = 18


# ---------------------------------------------------------------------------------------------- per prompt


def _pairs(baseline_run: Mapping[str, Any], run: Mapping[str, Any], key: str, where: str) -> np.ndarray:
    """[pairs, 2]: (baseline, condition) values of `key` per prompt, matched by prompt_index; prompts where
    either value is None are left out. The two runs must have asked the same prompts."""
    base_rows = {row["prompt_index"]: row for row in baseline_run["prompts"]}
    rows = {row["prompt_index"]: row for row in run["prompts"]}
    if base_rows.keys() != rows.keys():
        raise ValueError(f"{where}: the prompt indices differ from the baseline's")
    values = []
    for index, row in rows.items():
        base_row = base_rows[index]
        if base_row["prompt"] != row["prompt"]:
            raise ValueError(
                f"{where}: prompt {index} is {row['prompt']!r}, but the baseline's is {base_row['prompt']!r}"
            )
        if base_row[key] is not None and row[key] is not None:
            values.append((base_row[key], row[key]))
    return np.array(values, dtype=float).reshape(-1, 2)


def _headline(metrics: Metrics) -> float:
    """The one headline threshold of all runs: supports at different thresholds are not comparable."""
    thresholds = {float(run["headline_threshold"]) for runs in metrics.values() for run in runs.values()}
    if len(thresholds) != 1:
        raise ValueError(f"the runs disagree on the headline threshold: {sorted(thresholds)}")
    return thresholds.pop()


def _size_markers(sizes: Sequence[float | None]) -> dict[float | None, str]:
    """A marker per size: SIZE_MARKERS in ascending order of size (cycled if needed), one for unknown (None)."""
    known = sorted({s for s in sizes if s is not None})
    markers: dict[float | None, str] = {s: SIZE_MARKERS[i % len(SIZE_MARKERS)] for i, s in enumerate(known)}
    if None in sizes:
        markers[None] = UNKNOWN_SIZE_MARKER
    return markers


def _size_label(size: float | None) -> str:
    return "size unknown" if size is None else f"{size:g}B"


def open_multi_threshold_figure(
    metrics: Metrics,
    titles: Titles,
    model_families: Mapping[str, str],
    model_sizes: Mapping[str, float | None],
    baseline: str = "base",
):
    """fig:appendix-open-multi-threshold: one point per prompt/model pair, the baseline's value against a
    fine-tuned condition's. Rows: top-t first-token support at the headline threshold (log axes) and the unique
    output rate (%); columns: every condition other than `baseline`, in order of first appearance. Colour =
    model family, marker = model size; points above the y = x diagonal increased, and each panel title counts
    them (strictly greater, over the pairs where both values are defined). A model without a condition has no
    points in its column."""
    for model, runs in metrics.items():
        if baseline not in runs:
            raise ValueError(f"{titles.model(model)} ({model}) has no {baseline!r} run to compare with")
    conditions = list(dict.fromkeys(c for runs in metrics.values() for c in runs if c != baseline))
    if not conditions:
        raise ValueError(f"no condition other than the baseline {baseline!r}")
    rows = [
        ("support", f"top-{_headline(metrics):.0%} first-token support", "support", 1.0),
        ("unique_fraction", "unique output rate (%)", "unique rate", 100.0),
    ]
    models = list(metrics)
    families = list(dict.fromkeys(model_families[m] for m in models))
    family_colors = {f: FAMILY_COLORS[i % len(FAMILY_COLORS)] for i, f in enumerate(families)}
    markers = _size_markers([model_sizes[m] for m in models])
    base_title = titles.condition(baseline)

    figure, axes = plt.subplots(
        len(rows), len(conditions), figsize=(3.3 * len(conditions) + 1.4, 6.6), squeeze=False, layout="constrained"
    )
    for (key, label, short, scale), row_axes in zip(rows, axes, strict=True):
        pairs = {
            (m, c): scale * _pairs(metrics[m][baseline], metrics[m][c], key, f"{m}/{c}")
            for m in models
            for c in conditions
            if c in metrics[m]
        }
        every = np.concatenate([p.ravel() for p in pairs.values()])
        log = key == "support"
        if log:
            shown = every[every > 0]
            limits = (shown.min() / 1.5, shown.max() * 1.5) if shown.size else (0.5, 2.0)
        else:
            limits = (-0.04 * scale, 1.04 * scale)
        for ax, condition in zip(row_axes, conditions, strict=True):
            up = total = 0
            for model in models:
                points = pairs.get((model, condition))
                if points is None or not len(points):
                    continue
                up += int(np.sum(points[:, 1] > points[:, 0]))
                total += len(points)
                ax.scatter(
                    points[:, 0],
                    points[:, 1],
                    s=14,
                    marker=markers[model_sizes[model]],
                    color=family_colors[model_families[model]],
                    alpha=0.55,
                    linewidths=0,
                )
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.yaxis.set_minor_formatter(NullFormatter())
            ax.axline((limits[0], limits[0]), (limits[1], limits[1]), color="black", linewidth=0.8, linestyle="--")
            ax.set_xlim(limits)
            ax.set_ylim(limits)
            ax.set_aspect("equal")
            ax.set_title(f"{titles.condition(condition)}: {short} up on {up}/{total} pairs", fontsize=8)
            ax.set_xlabel(f"{base_title}: {label}", fontsize=7)
            ax.set_ylabel(f"{titles.condition(condition)}: {label}", fontsize=7)
            ax.tick_params(labelsize=7)
    family_handles = [
        Line2D([], [], linestyle="", marker="o", color=family_colors[f], label=f, markersize=6) for f in families
    ]
    size_handles = [
        Line2D([], [], linestyle="", marker=marker, color="#555555", label=_size_label(size), markersize=6)
        for size, marker in markers.items()
    ]
    legend = dict(fontsize=7, title_fontsize=7, frameon=False)
    figure.legend(handles=family_handles, loc="outside right upper", title="Family", **legend)
    figure.legend(handles=size_handles, loc="outside right lower", title="Size", **legend)
    return figure


# ---------------------------------------------------------------------------------------------- qualitative


def _most_common(state: Mapping[str, int], n: int) -> list[str]:
    """The `n` most frequent non-empty labels of one state; equal counts in order of the text."""
    ranked = sorted((label for label in state if label), key=lambda label: (-state[label], label))
    return ranked[:n]


def top_labels(counts: Mapping[str, Mapping[str, int]], per_state: int = 10, shown: int = 15) -> list[str]:
    """The labels the qualitative figure shows (the paper's rule): the `per_state` most frequent non-empty
    answers of each state (condition), united, ranked by peak empirical frequency across the states, then by
    total frequency, then by text; the first `shown`. A state's frequencies are relative to its own total count,
    empty answers included, so states with different sample counts compare fairly."""
    candidates = {label for state in counts.values() for label in _most_common(state, per_state)}
    if not candidates:
        return []
    labels = sorted(candidates)
    table = np.array([[state.get(label, 0) for state in counts.values()] for label in labels], dtype=float)
    totals = np.array([sum(state.values()) for state in counts.values()], dtype=float)
    frequencies = table / np.maximum(totals, 1.0)
    # lexsort: last key first; labels are sorted, so the position breaks the remaining ties by text
    order = np.lexsort((np.arange(len(labels)), -frequencies.sum(axis=1), -frequencies.max(axis=1)))
    return [labels[i] for i in order[:shown]]


def answer_counts(records: Sequence[Mapping[str, Any]], prompt: str) -> Counter:
    """How often each normalized answer occurs among `prompt`'s samples; empty answers ("") are counted too,
    so that the total is the number of samples."""
    counts = Counter(record["normalized"] for record in records if record["prompt"] == prompt)
    if not counts:
        raise ValueError(f"no sample answers the prompt {prompt!r}")
    return counts


def _truncate(text: str, chars: int) -> str:
    """`text` cut to `chars` characters and "…"; control characters (which fonts lack) shown as "�"."""
    text = "".join(ch if ch.isprintable() else "�" for ch in text)
    return text if len(text) <= chars else text[:chars] + "…"


def _prompt_name(prompt: str) -> str:
    """A short name of a prompt for a panel title: its category ("city") for "<Verb> a random <category>.
    Output ONLY the answer.", else the prompt cut to PROMPT_CHARS characters."""
    match = PROMPT_PATTERN.match(prompt)
    return match["category"] if match else _truncate(prompt, PROMPT_CHARS)


def open_qualitative_figure(
    panels: Sequence[tuple[str, str, Mapping[str, Counter]]],
    titles: Titles,
):
    """fig:appendix-open-qualitative: one panel per (model title, prompt, {condition: answer counts}), a row
    per model and a column per prompt (order of first appearance). Each panel shows, for the answers chosen by
    `top_labels` (most frequent at the top), every condition's empirical frequency as side-by-side horizontal
    bars."""
    if not panels:
        raise ValueError("no panels")
    models = list(dict.fromkeys(model for model, _, _ in panels))
    prompts = list(dict.fromkeys(prompt for _, prompt, _ in panels))
    cells = {}
    for model, prompt, counts in panels:
        if (model, prompt) in cells:
            raise ValueError(f"two panels for {model!r} and the prompt {prompt!r}")
        cells[model, prompt] = (counts, top_labels(counts))
    conditions = list(dict.fromkeys(c for _, _, counts in panels for c in counts))
    colors = condition_colors(conditions)
    most = max(len(labels) for _, labels in cells.values())
    figure, axes = plt.subplots(
        len(models),
        len(prompts),
        figsize=(3.4 * len(prompts), (0.08 * len(conditions) * max(most, 1) + 0.9) * len(models)),
        squeeze=False,
        layout="constrained",
    )
    for (i, model), (j, prompt) in ((m, p) for m in enumerate(models) for p in enumerate(prompts)):
        ax = axes[i, j]
        if (model, prompt) not in cells:
            ax.set_visible(False)
            continue
        counts, labels = cells[model, prompt]
        ax.set_title(f"{model}: {_prompt_name(prompt)}", fontsize=8)
        ax.tick_params(labelsize=7)
        if not labels:
            ax.text(0.5, 0.5, "no non-empty answer", ha="center", va="center", fontsize=7, transform=ax.transAxes)
            ax.set_yticks([])
            continue
        height = 0.8 / len(counts)
        rows = np.arange(len(labels))
        for k, (condition, state) in enumerate(counts.items()):
            total = max(sum(state.values()), 1)
            frequencies = np.array([state.get(label, 0) for label in labels]) / total
            ax.barh(rows - 0.4 + (k + 0.5) * height, frequencies, height, color=colors[condition], linewidth=0)
        ax.set_yticks(rows, [_truncate(label, LABEL_CHARS) for label in labels])
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the most frequent answer on top
        ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xlabel("empirical frequency", fontsize=7)
    handles = [Patch(color=colors[c], label=titles.condition(c)) for c in conditions]
    figure.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return figure


# ---------------------------------------------------------------------------------------------- renderers
# The registry's renderers (calibft.artifacts.registry): result files and settings in, a Figure out.


def render_open_multi_threshold_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    return open_multi_threshold_figure(
        read_runs(inputs["open_ended"], settings["runs"]),
        Titles.of(settings),
        model_families=settings["model_families"],
        model_sizes=settings["model_sizes"],
    )


def render_open_qualitative_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    """A panel per qualitative model and prompt, from the samples of each model's conditions (model after
    model, conditions in order)."""
    titles = Titles.of(settings)
    panels = []
    paths = iter(inputs["open_ended_samples"])
    for model in settings["qualitative"]["models"]:
        records = {condition: read_jsonl(next(paths)) for condition in settings["conditions"]}
        for prompt in settings["qualitative"]["prompts"]:
            counts = {condition: answer_counts(records[condition], prompt) for condition in settings["conditions"]}
            panels.append((titles.model(model), prompt, counts))
    return open_qualitative_figure(panels, titles)
