"""The exact structured evaluation (`calibft.evals.exact`): its tables (exact_structured_ood,
exact_structured_unseen) and the figure that sets each prompt's sampled normalized W₁ against its exact value.

Functions read the exact evaluation's `metrics.json` dicts, passed as `metrics[model][condition]` for one split,
and return a `Table` or a matplotlib Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from calibft.artifacts.figures import PANEL_TITLES, W1_CLIP, condition_colors
from calibft.artifacts.formats import format_kl, format_three, format_w1
from calibft.artifacts.runs import (
    SPLITS,
    Runs,
    Titles,
    aggregate_bounds,
    aggregates,
    read_runs_by_split,
)
from calibft.artifacts.tables import Table, grouped_table
from calibft.core.checks import check_choice
from calibft.core.io import read_runs
from calibft.evals.metrics import SPREAD_LEVEL

EVALUATION = "exact"
W1_GROUP = {"ood": "Exact OOD W₁ ↓", "unseen": "Exact Unseen-Param W₁ ↓"}
KL_SPACE_GROUP = "KL on space ↓"
KL_SEQUENCES_GROUP = "KL sequences ↓"
MASS_GROUP = "Mass on space ↑"


def exact_table(
    metrics: Runs,
    split: str,
    titles: Titles,
) -> Table:
    """Per model and condition: the exact normalized W₁ (family median), the exact KL on the space and over
    sequences, and the mass on the space. Best value of each metric per model in bold."""
    check_choice("split", split, SPLITS)
    conditions = titles.shown(metrics)
    keys = {
        W1_GROUP[split]: ("w1_norm", format_w1, True),
        KL_SPACE_GROUP: ("kl_on_space", format_kl, True),
        KL_SEQUENCES_GROUP: ("kl_sequences", format_kl, True),
        MASS_GROUP: ("mass", format_three, False),
    }
    groups = [
        (group, aggregates(metrics, key, split, conditions, evaluation=EVALUATION), fmt, lowest)
        for group, (key, fmt, lowest) in keys.items()
    ]
    bounds = {group: aggregate_bounds(metrics, key, split, conditions) for group, (key, _, _) in keys.items()}
    where = "held-out distribution families" if split == "ood" else "unseen parameter settings of seen families"
    caption = (
        f"Exact structured evaluation on {where}: the model's probability of every value of the evaluation space, "
        f"computed from its token trie instead of sampled. {titles.sentence(conditions)} "
        "Exact W₁ is the normalized Wasserstein-1 distance of the model's distribution renormalized on the space, "
        "averaged within family and then aggregated with a median across families; KL on space is "
        "KL(target || model renormalized on the space) and KL sequences counts the mass off the space, both "
        "averaged within and then across families; Mass on space is the probability that the answer is exactly "
        "one of the space's canonical strings. Bold: the best value of each metric per model; --- where a family "
        "has no finite value. Where the walk expanded part of the trie, [low, high] follows a value whose "
        "certified bounds are wider than its printed precision (∞: no upper bound)."
    )
    return grouped_table(groups, titles, f"tab:exact-structured-{split}", caption, bounds=bounds)


def _points(runs: Mapping[str, Any], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exact, sampled, spread [2, n]) of the prompts of `runs` (one condition of every model) where all three
    are defined; `key`: "on_space" or "sampled"."""
    exact, sampled, spread = [], [], []
    for run in runs.values():
        for row in run["prompts"]:
            part = row[key]
            if row["w1_norm"] is not None and part["w1_norm"] is not None and part["spread"] is not None:
                exact.append(row["w1_norm"])
                sampled.append(part["w1_norm"])
                spread.append(part["spread"])
    return np.array(exact), np.array(sampled), np.array(spread).reshape(-1, 2).T


def exact_figure(
    metrics_by_split: Mapping[str, Runs],
    titles: Titles,
    clip: float = W1_CLIP,
):
    """One panel per split (rows) and condition (columns), one point per prompt and model: the sampled
    normalized W₁ of the answers on the space against the exact value, with the spread that as many draws from
    the exact distribution give; hollow: the sampled W₁ of every valid answer, the paper's."""
    splits = [split for split in SPLITS if split in metrics_by_split]
    if not splits:
        raise ValueError(f"metrics_by_split has none of the splits {SPLITS}")
    conditions = list(dict.fromkeys(c for s in splits for c in titles.shown(metrics_by_split[s])))
    colors = condition_colors(conditions)
    figure, axes = plt.subplots(
        len(splits), len(conditions), figsize=(2.6 * len(conditions), 2.6 * len(splits)), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    for row, split in enumerate(splits):
        for column, condition in enumerate(conditions):
            runs = {m: r[condition] for m, r in metrics_by_split[split].items() if r.get(condition) is not None}
            _panel(axes[row, column], runs, colors[condition], clip)
            inside, counted = within_counts(runs)
            inside = f"{inside}/{counted} within" if counted else "none on the space"
            title = f"{titles.condition(condition)} · {PANEL_TITLES[split]}\n{inside}"
            axes[row, column].set_title(title, fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("exact normalized W₁", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("sampled normalized W₁", fontsize=8)
    handles = [
        Line2D([], [], color="0.3", marker="o", linestyle="", label="answers on the space"),
        Line2D([], [], color="0.3", marker="o", markerfacecolor="none", linestyle="", label="every valid answer"),
        Line2D([], [], color="0.3", label=f"{SPREAD_LEVEL:.0%} spread of as many exact draws"),
        Line2D([], [], color="0.3", marker="^", markerfacecolor="none", linestyle="", label="beyond the axes"),
    ]
    figure.legend(handles=handles, loc="outside upper center", ncol=4, fontsize=7, frameon=False)
    return figure


def within_counts(runs: Mapping[str, Any]) -> tuple[int, int]:
    """(prompts whose on-space sampled W₁ lies within its spread, prompts with one) over `runs`."""
    within = [run["aggregate"]["within_spread"] for run in runs.values()]
    return sum(w["within"] for w in within), sum(w["prompts"] for w in within)


def _panel(ax, runs: Mapping[str, Any], color: str, clip: float) -> None:
    """One condition and split on log axes: each prompt's spread as a vertical segment at its exact W₁, the
    on-space sampled W₁ filled, every valid answer's hollow; a value beyond the axes (or `clip`) is drawn at the
    edge as a triangle. The axes span the exact values, the spreads and the on-space points."""
    exact, on_space, spread = _points(runs, "on_space")
    all_exact, all_valid, _ = _points(runs, "sampled")
    spanned = np.concatenate([exact, on_space, spread.ravel(), all_exact])
    spanned = spanned[np.isfinite(spanned) & (spanned > 0)]
    if not len(spanned):
        ax.text(0.5, 0.5, "no prompt with a valid answer", transform=ax.transAxes, ha="center", fontsize=7)
        return
    low, high = spanned.min() / 2, min(spanned.max() * 2, clip)
    ax.vlines(exact, spread[0], spread[1], color=color, linewidth=0.8, alpha=0.7)
    for x, y, face in ((all_exact, all_valid, "none"), (exact, on_space, color)):
        beyond = y > high
        ax.scatter(x[~beyond], y[~beyond], s=12, marker="o", facecolors=face, edgecolors=color, linewidths=0.7)
        ax.scatter(x[beyond], np.full(beyond.sum(), high), s=16, marker="^", facecolors=face, edgecolors=color,
                   linewidths=0.7, clip_on=False)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.plot([low, high], [low, high], color="0.6", linewidth=0.6, linestyle="--", zorder=0)
    ax.tick_params(labelsize=7)


def render_exact_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return exact_table(read_runs(inputs["exact"], settings["runs"]), settings["split"], Titles.of(settings))


def render_exact_figure(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    return exact_figure(read_runs_by_split(inputs["exact"], settings["splits"], settings["runs"]), Titles.of(settings))
