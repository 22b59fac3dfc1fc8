"""The structured-sampling evaluation as the paper shows it: the aggregate tables (tab:main-ood,
tab:main-unseen), their SSOT comparison (tab:ssot-structured-ood, tab:ssot-structured-unseen), the bar charts
of normalized W₁ and logit KL (fig:main-structured-sampling and the per-distribution appendix figures) and the
qualitative overlays of samples on the target law (fig:main-ood-qualitative, fig:appendix-ssot-qualitative).

Every function reads the `metrics.json` dicts of the evaluation, passed as `metrics[model][condition]` for one
split (model and condition order = mapping order), and returns a `Table` or a matplotlib Figure; the caller
writes them with `write_table` and `save_figure`. Undefined values (`null`: no valid sample, or not finite)
print as "---" in tables and as hatched bars in figures; astronomically large values (1e223 happens) are
printed in scientific notation and clipped on the figures' axes with their value written above the bar.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from calibft.artifacts.config_tables import SYMBOLS
from calibft.artifacts.figures import (
    PANEL_TITLES,
    UNDEFINED_HATCH,
    W1_CLIP,
    bar_panels,
    condition_colors,
    grouped_bars,
    panel_label_rotation,
)
from calibft.artifacts.formats import count_words, format_kl, format_number, format_rate, format_w1
from calibft.artifacts.runs import (
    SPLITS,
    Titles,
    aggregate_intervals,
    aggregates,
    check_run,
    first_seen,
    number,
    read_runs_by_split,
)
from calibft.artifacts.tables import Table, grouped_table
from calibft.core.checks import check_choice
from calibft.core.io import read_runs
from calibft.data.families import family
from calibft.data.grid import Prompt, prompts, select
from calibft.evals.metrics import within_families

Metrics = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model -> condition -> metrics.json of one split

W1_GROUP = {"ood": "OOD W₁ ↓", "unseen": "Unseen-Param W₁ ↓"}
KL_GROUP = "Logit KL ↓"
VALID_GROUP = "Valid rate ↑"
KEY_LABELS = {"w1_norm": "normalized W₁", "logit_kl": "logit KL"}

QUANTILE_RANGE = (0.005, 0.995)  # the target's range shown in the qualitative figures
HIST_BINS = 40
MAX_INTEGER_BINS = 60
PEAK_FACTOR = 4.0  # a histogram may rise to this multiple of the target's peak before it is clipped


# ---------------------------------------------------------------------------------------------- data


def valid_values(path: str | Path) -> dict[str, np.ndarray]:
    """The valid sampled values of each prompt id in a `samples.jsonl.gz`, in file order.

    A prompt whose samples are all invalid maps to an empty array, so that "sampled, nothing valid" stays
    distinguishable from "not sampled" (absent)."""
    values: dict[str, list[float]] = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            kept = values.setdefault(record["id"], [])
            if record["valid"] and record["value"] is not None:
                kept.append(float(record["value"]))
    return {prompt_id: np.asarray(kept, dtype=float) for prompt_id, kept in values.items()}


def prompt_title(prompt: Prompt) -> str:
    """`Poisson (λ=4)`: the family's display name and the prompt's parameters."""
    params = ", ".join(f"{SYMBOLS.get(name, name)}={format_number(value)}" for name, value in prompt.params.items())
    return f"{family(prompt.family).display} ({params})"


# ---------------------------------------------------------------------------------------------- tables


def _split_text(split: str, metrics: Metrics) -> tuple[str, str]:
    """(what the split is, where its W₁ median runs over), for captions: over the prompts that the runs
    evaluated (the whole split, or a smoke run's few)."""
    evaluated = {row["id"] for runs in metrics.values() for run in runs.values() for row in run.get("prompts", [])}
    split_prompts = [p for p in prompts(split) if p.id in evaluated] or prompts(split)
    families = len({p.family for p in split_prompts})
    if split == "ood":
        return (
            "held-out distribution families",
            f"over {len(split_prompts)} held-out configurations from {count_words(families)} OOD families",
        )
    return (
        "unseen parameter settings from seen distribution families",
        f"over {len(split_prompts)} unseen configurations, one for each of {families} seen families",
    )


def structured_table(
    metrics: Metrics,
    split: str,
    titles: Titles,
) -> Table:
    """tab:main-ood / tab:main-unseen: per model, the family-median normalized W₁, the logit KL and the valid
    rate of each condition (by default every condition in `metrics`, in order). The best value of each metric
    per model is bold (lowest W₁ and KL, highest valid rate; ties as printed all bold)."""
    check_choice("split", split, SPLITS)
    conditions = titles.shown(metrics)
    keys = {W1_GROUP[split]: "w1_norm", KL_GROUP: "logit_kl", VALID_GROUP: "valid_rate"}
    w1, kl, valid = (aggregates(metrics, key, split, conditions) for key in keys.values())
    intervals = {group: aggregate_intervals(metrics, key, split, conditions) for group, key in keys.items()}
    what, over = _split_text(split, metrics)
    caption = (
        f"Structured-sampling results on {what}. For each model, {titles.sentence(conditions)} "
        f"{W1_GROUP[split][:-2]} is the Q₉₅-Q₀₅ normalized Wasserstein-1 distance, averaged within family and then "
        f"aggregated across families with a median {over}; Logit KL is the corresponding trie-based "
        "logit-evaluation average against the shared evaluation target; Valid rate is the fraction of generations "
        "that parse to in-support numeric outputs. Bold: the best value of each metric per model. Entries marked "
        "--- are undefined: at least one family has no finite W₁ estimate."
    )
    groups = [
        (W1_GROUP[split], w1, format_w1, True),
        (KL_GROUP, kl, format_kl, True),
        (VALID_GROUP, valid, format_rate, False),
    ]
    return grouped_table(groups, titles, f"tab:main-{split}", caption, intervals)


def _ssot_runs(ssot_metrics: Mapping[str, Mapping[str, Any]], models: Sequence[str]) -> Metrics:
    return {model: {"ssot": ssot_metrics[model]} if model in ssot_metrics else {} for model in models}


def _samples_text(runs: Sequence[Mapping[str, Any]]) -> str:
    counts = sorted({int(run["samples_per_prompt"]) for run in runs})
    if not counts:
        return ""
    if len(counts) == 1:
        return f"{counts[0]:,}"
    return f"{counts[0]:,} to {counts[-1]:,}"


def ssot_table(
    metrics: Metrics,
    ssot_metrics: Mapping[str, Mapping[str, Any]],
    split: str,
    titles: Titles,
) -> Table:
    """tab:ssot-structured-ood / -unseen: W₁ and valid rate of the conditions `titles` shows (base and soft where
    it names none; from `metrics[model]`) next to the SSOT baseline (`ssot_metrics[model]`: that model's SSOT
    metrics.json). Rows: the models of `metrics`; a model without an SSOT run shows "---". Nothing bold, as in the
    paper."""
    check_choice("split", split, SPLITS)
    conditions = titles.conditions or ("base", "soft")
    models = list(metrics)
    ssot = _ssot_runs(ssot_metrics, models)

    def with_ssot(of: Callable[..., pd.DataFrame], key: str) -> pd.DataFrame:
        """`of` (aggregates or their intervals) of `conditions`, then of the SSOT baseline."""
        ours, baseline = of(metrics, key, split, conditions), of(ssot, key, split, ["ssot"], evaluation="ssot")
        return pd.concat([ours, baseline], axis=1)

    keys = {W1_GROUP[split]: "w1_norm", VALID_GROUP: "valid_rate"}
    w1, valid = (with_ssot(aggregates, key) for key in keys.values())
    intervals = {group: with_ssot(aggregate_intervals, key) for group, key in keys.items()}
    what, _ = _split_text(split, metrics)
    samples = _samples_text([runs["ssot"] for runs in ssot.values() if "ssot" in runs])
    names = ", ".join(titles.condition(c) for c in conditions)
    ssot_title = titles.condition_titles.get("ssot", "SSOT")
    caption = (
        f"Structured-sampling comparison on {what} between {names}, and the {ssot_title} "
        f"inference-time baseline. {f'SSOT uses {samples} generations per prompt. ' if samples else ''}"
        "Lower W₁ and higher valid rate are better; --- indicates an undefined aggregate W₁."
    )
    groups = [(W1_GROUP[split], w1, format_w1, None), (VALID_GROUP, valid, format_rate, None)]
    return grouped_table(groups, titles, f"tab:ssot-structured-{split}", caption, intervals)


# ---------------------------------------------------------------------------------------------- bar charts


def _limits(values: Sequence[np.ndarray], clip: float | None) -> dict[str, Any]:
    """`grouped_bars`' bottom, ceiling and clipped of a log axis: bottom a decade at least 2× below the smallest
    positive value, ceiling the decade at or above the largest, at most `clip`; clipped when a value exceeds
    `clip`."""
    finite = np.concatenate([np.ravel(v) for v in values])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    if finite.size == 0:
        return {"bottom": 0.1, "ceiling": 1.0, "clipped": False}
    bottom = 10.0 ** math.floor(math.log10(finite.min()) - 0.3)  # the smallest bar stays visible
    ceiling = 10.0 ** math.ceil(math.log10(finite.max()))
    clipped = clip is not None and bool((finite > clip).any())
    if clip is not None:
        ceiling = min(ceiling, clip)
    return {"bottom": bottom, "ceiling": max(ceiling, 10 * bottom), "clipped": clipped}


def _legend_handles(
    conditions: Sequence[str],
    colors: Mapping[str, str],
    titles: Titles,
    clipped: float | None,
    values: Iterable[np.ndarray],
) -> list:
    """The conditions' colours; the hatch and the clipping line only when some bar shows them (an undefined
    value among `values`, a clipped one)."""
    handles: list = [Patch(facecolor=colors[c], label=titles.condition(c)) for c in conditions]
    if any(not np.isfinite(v).all() for v in values):
        label = "undefined (no finite value)"
        handles.append(Patch(fill=False, hatch=UNDEFINED_HATCH, edgecolor="#555555", label=label))
    if clipped is not None:
        label = f"above {format_number(clipped)}: clipped, value printed"
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=0.7, label=label))
    return handles


def structured_sampling_figure(
    metrics_by_split: Mapping[str, Metrics],
    titles: Titles,
    clip: float = W1_CLIP,
):
    """fig:main-structured-sampling (`main_structured_sampling`): family-median normalized W₁ per model and
    condition, held-out families left, unseen parameters right, on one shared log axis."""
    splits = [split for split in SPLITS if split in metrics_by_split]
    if not splits:
        raise ValueError(f"metrics_by_split has none of the splits {SPLITS}")
    models = first_seen(*(metrics_by_split[s] for s in splits))
    conditions = list(dict.fromkeys(c for s in splits for c in titles.shown(metrics_by_split[s])))
    values = {
        split: aggregates(metrics_by_split[split], "w1_norm", split, conditions)
        .reindex(index=models)
        .to_numpy(dtype=float)
        for split in splits
    }
    limits = _limits(list(values.values()), clip)
    colors = condition_colors(conditions)
    bar_colors = [colors[c] for c in conditions]
    # at most 3.6 in a panel: the paper prints the figure at its 5.5 in text width, so that 7 pt text stays
    # above 5 pt there even with the twelve models
    width = min(3.6, max(3.2, 1.0 + 0.45 * len(models) * max(1, len(conditions)) / 3))
    figure, axes = plt.subplots(
        1, len(splits), figsize=(width * len(splits), 3.6), sharey=True, squeeze=False, layout="constrained"
    )
    labels = [titles.model(m) for m in models]
    for ax, split in zip(axes[0], splits, strict=True):
        grouped_bars(
            ax, values[split], bar_colors, labels, log=True, rotation=panel_label_rotation(labels, angle=45.0), **limits
        )
        ax.set_title(PANEL_TITLES[split], fontsize=9)
    axes[0, 0].set_ylabel("family-median normalized W₁ (log)", fontsize=8)
    shown_clip = clip if limits["clipped"] else None
    handles = _legend_handles(conditions, colors, titles, shown_clip, values.values())
    figure.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=7, frameon=False)
    return figure


def _panel_values(
    metrics: Metrics, split: str, key: str, models: Sequence[str], conditions: Sequence[str], within: str = "mean"
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Panel titles and, per panel, models × conditions: per family for `ood` (the `within` reduction, mean or
    median, of its prompts' finite values), per prompt for `unseen`. Panels are the families (prompts) that some
    run reports, in the grid's order."""
    reported: dict[tuple[str, str], dict[str, float]] = {}
    for model in models:
        for condition in conditions:
            run = metrics[model].get(condition)
            if run is not None:
                check_run(run, split, "structured", f"{model}/{condition}")
                if split == "ood" and within == "median":
                    rows = run["prompts"]
                    values = [number(entry[key]) for entry in rows]
                    by_family = within_families(values, [entry["family"] for entry in rows], within)
                    reported[model, condition] = {name: number(v) for name, v in by_family.items()}
                else:  # the family means of metrics.json, or the prompts' own values
                    level, field = ("families", "family") if split == "ood" else ("prompts", "id")
                    reported[model, condition] = {entry[field]: number(entry[key]) for entry in run[level]}
    seen = {name for entries in reported.values() for name in entries}
    if split == "ood":
        order = list(dict.fromkeys(p.family for p in prompts(split)))
        titles = {name: family(name).display for name in order}
    else:
        order = [p.id for p in prompts(split)]
        titles = {p.id: prompt_title(p) for p in prompts(split)}
    unknown = seen - set(order)
    if unknown:
        raise ValueError(f"{split}: the metrics report {sorted(unknown)}, which are not in the split")
    panels = [name for name in order if name in seen]
    values = {
        name: np.array(
            [[reported.get((m, c), {}).get(name, math.nan) for c in conditions] for m in models], dtype=float
        )
        for name in panels
    }
    return [titles[name] for name in panels], {titles[name]: values[name] for name in panels}


def per_distribution_figure(
    metrics: Metrics,
    split: str,
    key: str,
    titles: Titles,
    clip: float | None = W1_CLIP,
    w1_within_family: str = "mean",
):
    """appendix_{ood,unseen}_{w1,kl}_per_dist: `key` ("w1_norm" or "logit_kl") per model and condition, one
    panel per held-out family (`ood`: the mean of its configurations' values, or for W₁ their
    `w1_within_family`, the `w1_per_distribution` switch of `calibft.core.protocol`) or per unseen configuration
    (`unseen`, prompt-level values). Each panel has its own log axis; model names label the bottom row only.
    `clip` applies to W₁."""
    check_choice("split", split, SPLITS)
    check_choice("key", key, KEY_LABELS)
    models = list(metrics)
    conditions = titles.shown(metrics)
    within = w1_within_family if key == "w1_norm" else "mean"
    panel_titles, values = _panel_values(metrics, split, key, models, conditions, within)
    if not panel_titles:
        raise ValueError(f"{split}: no run reports any {key}")
    clip = clip if key == "w1_norm" else None
    colors = condition_colors(conditions)
    bar_colors = [colors[c] for c in conditions]
    many = len(models) * len(conditions) > 12
    columns = min(len(panel_titles), (2 if many else 3) if split == "ood" else (3 if many else 4))
    labels = [titles.model(m) for m in models]
    rotation = panel_label_rotation(labels)
    figure, axes = bar_panels(len(panel_titles), columns, labels, len(conditions))
    any_clipped = False
    for i, (ax, title) in enumerate(zip(axes, panel_titles, strict=True)):
        limits = _limits([values[title]], clip)
        any_clipped |= limits["clipped"]
        bottom_row = i + columns >= len(panel_titles)
        grouped_bars(
            ax, values[title], bar_colors, labels, log=True, rotation=rotation, show_labels=bottom_row, **limits
        )
        ax.set_title(title, fontsize=8)
        if i % columns == 0:
            # held-out families: the mean (or median) over each family's configurations
            ax.set_ylabel((f"family-{within} " if split == "ood" else "") + KEY_LABELS[key], fontsize=8)
    handles = _legend_handles(conditions, colors, titles, clip if any_clipped else None, values.values())
    figure.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return figure


# ---------------------------------------------------------------------------------------------- qualitative


def _target_range(law, integer: bool, samples: Sequence[np.ndarray]) -> tuple[float, float]:
    """The x-range of a panel: the target's Q0.5%-Q99.5% range, widened to the samples' 1%-99% range but by
    at most one target width on each side, so that a shifted sample set shows and an extreme one does not
    squash the target."""
    lo, hi = (float(q) for q in law.ppf(QUANTILE_RANGE))
    width = hi - lo if hi > lo else 1.0
    start, stop = lo, hi
    for values in samples:
        finite = values[np.isfinite(values)]
        if finite.size:
            q_lo, q_hi = np.quantile(finite, [0.01, 0.99])
            start, stop = min(start, max(q_lo, lo - width)), max(stop, min(q_hi, hi + width))
    if integer:
        return math.floor(start) - 0.5, math.ceil(stop) + 0.5
    margin = 0.02 * (stop - start)
    return start - margin, stop + margin


def _edges(start: float, stop: float, integer: bool) -> np.ndarray:
    """Histogram bins: unit bins centred on the integers (wider integer bins on wide ranges), else HIST_BINS."""
    if not integer:
        return np.linspace(start, stop, HIST_BINS + 1)
    step = max(1, math.ceil((stop - start) / MAX_INTEGER_BINS))
    return np.arange(start, stop + step, step, dtype=float)


def sample_density(values: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, int]:
    """Histogram heights normalized by ALL the values (area = the share inside the bins), and how many values
    fall outside the bins (non-finite ones included)."""
    inside = np.isfinite(values) & (values >= edges[0]) & (values <= edges[-1])
    counts, _ = np.histogram(values[inside], bins=edges)
    total = max(len(values), 1)
    return counts / (total * np.diff(edges)), int(len(values) - inside.sum())


def _draw_target(ax, law, integer: bool, edges: np.ndarray) -> float:
    """The target: its pdf as a line, or for integer families its mass per bin as a black level across the bin
    (the bars of the conditions stand side by side below it). Returns the target's peak density per unit."""
    if integer:
        bin_mass = np.diff(law.cdf(np.floor(edges)))  # edges sit at k - 0.5: the mass of the integers in the bin
        density = bin_mass / np.diff(edges)
        ax.hlines(density, edges[:-1] + 0.04, edges[1:] - 0.04, color="black", linewidth=1.4, zorder=3)
        return float(density.max())
    x = np.linspace(edges[0], edges[-1], 400)
    ax.plot(x, law.pdf(x), color="black", linewidth=1.3, zorder=3)
    return float((np.diff(law.cdf(edges)) / np.diff(edges)).max())


def _draw_samples(ax, density: np.ndarray, edges: np.ndarray, integer: bool, slot: tuple[int, int], color: str) -> None:
    """A condition's histogram: side-by-side bars for integer families (`slot` = (this one, how many)), an
    outlined, lightly filled step histogram for continuous ones."""
    if integer:
        j, n = slot
        width = np.diff(edges) * 0.84 / n
        x = edges[:-1] + np.diff(edges) * 0.08 + (j + 0.5) * width
        ax.bar(x, density, width, color=color, alpha=0.85, linewidth=0)
        return
    ax.stairs(density, edges, fill=True, color=color, alpha=0.15, linewidth=0)
    ax.stairs(density, edges, color=color, linewidth=1.1)


def _mark_clipped(ax, density: np.ndarray, edges: np.ndarray, top: float, color: str) -> float | None:
    """Triangles at the top above the bins that are cut off; returns the share of samples in the tallest bin,
    None when nothing is cut."""
    over = density > top
    if not over.any():
        return None
    centres = (edges[:-1] + edges[1:]) / 2
    ax.plot(centres[over], np.full(over.sum(), top), "v", color=color, markersize=5, clip_on=False, zorder=4)
    j = int(np.argmax(density))
    return float(density[j] * (edges[j + 1] - edges[j]))


def qualitative_figure(
    panels: Sequence[tuple[str, Prompt, Mapping[str, np.ndarray]]],
    titles: Titles,
    title: str | None = None,
    columns: int = 4,
):
    """Samples against the target, one panel per (title, prompt, {condition: valid values}): the target pdf
    (continuous) or pmf (integer families) with each condition's normalized histogram. Histogram areas are
    shares of all valid samples; a note in the corner counts the samples outside the shown range; bins taller
    than PEAK_FACTOR × the target's peak are cut and marked with a triangle at the top (the note gives the share
    of samples in the tallest). Used for main_ood_qualitative (base, soft, hard) and appendix_ssot_qualitative
    (base, SSOT, soft)."""
    if not panels:
        raise ValueError("no panels")
    conditions = list(dict.fromkeys(c for _, _, samples in panels for c in samples))
    colors = condition_colors(conditions)
    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.8 * rows), squeeze=False, layout="constrained")
    for ax, (panel_title, prompt, samples) in zip(axes.flat, panels, strict=False):
        fam = family(prompt.family)
        law = fam.law(prompt.params)
        samples = {c: np.asarray(v, dtype=float) for c, v in samples.items()}
        edges = _edges(*_target_range(law, fam.integer, list(samples.values())), fam.integer)
        peak = _draw_target(ax, law, fam.integer, edges)
        heights = {c: sample_density(v, edges) for c, v in samples.items()}
        tallest = max([peak, *(h.max(initial=0.0) for h, _ in heights.values())])
        top = 1.25 * min(tallest, PEAK_FACTOR * peak)  # headroom for the notes in the corner
        notes = []
        for j, (condition, values) in enumerate(samples.items()):
            density, outside = heights[condition]
            color, name = colors[condition], titles.condition(condition)
            _draw_samples(ax, density, edges, fam.integer, (j, len(samples)), color=color)
            share = _mark_clipped(ax, density, edges, top, color)
            if share is not None:
                notes.append((f"{name}: cut at ▼, {share:.0%} in one bin", color))
            if len(values) == 0:
                notes.append((f"{name}: no valid sample", color))
            elif outside:
                notes.append((f"{name}: {outside} of {len(values)} outside", color))
        for k, (text, color) in enumerate(notes):
            ax.annotate(
                text,
                (0.98, 0.97),
                xytext=(0, -8 * k),
                xycoords="axes fraction",
                textcoords="offset points",
                ha="right",
                va="top",
                fontsize=6,
                color=color,
            )
        ax.set_xlim(edges[0], edges[-1])
        if fam.integer:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, top)
        ax.set_title(f"{panel_title}\n{prompt_title(prompt)}" if panel_title else prompt_title(prompt), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylabel("probability" if fam.integer and np.all(np.diff(edges) == 1) else "density", fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [Line2D([], [], color="black", linewidth=1.3, label="Target")]
    handles += [
        Patch(facecolor=colors[c], alpha=0.6, edgecolor=colors[c], label=titles.condition(c)) for c in conditions
    ]
    figure.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


# ---------------------------------------------------------------------------------------------- renderers
# The registry's renderers (calibft.artifacts.registry): result files and settings in, a Table or Figure out.


def render_structured_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return structured_table(read_runs(inputs["structured"], settings["runs"]), settings["split"], Titles.of(settings))


def render_ssot_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    ssot = {
        model: json.loads(Path(path).read_text())
        for model, path in zip(settings["models"], inputs["ssot"], strict=True)
    }
    metrics = read_runs(inputs["structured"], settings["runs"])
    return ssot_table(metrics, ssot, settings["split"], Titles.of(settings, settings["ssot_conditions"]))


def render_structured_sampling_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    return structured_sampling_figure(
        read_runs_by_split(inputs["structured"], settings["splits"], settings["runs"]), Titles.of(settings)
    )


def render_per_distribution_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    metrics = read_runs(inputs["structured"], settings["runs"])
    within = settings["w1_within_family"]
    return per_distribution_figure(
        metrics, settings["split"], settings["metric"], Titles.of(settings), w1_within_family=within
    )


def render_qualitative_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    """One panel per (model, prompt) of `settings["panels"]` ([model, condition, prompt id] triples, one per
    samples file), with the valid samples of each of its conditions."""
    grouped: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for path, (model, condition, prompt_id) in zip(inputs["samples"], settings["panels"], strict=True):
        grouped.setdefault((model, prompt_id), {})[condition] = valid_values(path).get(prompt_id, [])
    ood = prompts("ood")
    titles = Titles.of(settings)
    panels = [
        (titles.model(model), select(ood, [prompt_id])[0], samples) for (model, prompt_id), samples in grouped.items()
    ]
    return qualitative_figure(panels, titles)
