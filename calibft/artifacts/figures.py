"""Figures: each saved as `{name}.pdf` (for the paper) and `{name}.png` (for a person), atomically; the bar
charts' building blocks (`grouped_bars`, `bar_panels`) and the colour of each condition (`condition_colors`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from calibft.core.io import atomic_path, read_jsonl

# Major ticks of a log axis at 1, 2, 3 and 5 of each decade: a range within one decade still has labels.
LOG_TICKS = (1.0, 2.0, 3.0, 5.0)
UNDEFINED_HATCH = "////"  # an undefined value: a hatched, unfilled bar
CLIPPED_HEADROOM = 10**0.9  # room above the ceiling of a log axis for the clipped bars' values

# The same condition has the same colour in every figure; unknown conditions take the next of CYCLE.
CONDITION_COLORS = {"base": "#8c8c8c", "soft": "#1f77b4", "hard": "#d62728", "ssot": "#2ca02c"}
CYCLE = ("#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22")

# Normalized W₁ is in units of the target's Q95-Q05 width: beyond 100 widths a sample set is simply broken,
# and drawing 1e223 on the same axis as 0.05 would flatten every other bar.
W1_CLIP = 100.0
PANEL_TITLES = {"ood": "Held-out families (OOD)", "unseen": "Unseen parameters"}  # the title of a split's panel


def plain_log_ticks(axis, decades: float = 1.0) -> None:
    """Label a log axis that spans `decades` at `LOG_TICKS` (at the powers of ten only beyond two decades),
    printed plainly (0.2, 0.3, 1, 2,000), without minor labels."""
    axis.set_major_locator(LogLocator(subs=LOG_TICKS if decades <= 2 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _short(value: float) -> str:
    """A clipped bar's value in a few characters: `170`, `5470`, `1.2e4`, `4.2e223`."""
    return f"{value:.0f}" if value < 1e4 else f"{value:.1e}".replace("e+0", "e").replace("e+", "e")


def grouped_bars(
    ax,
    values: np.ndarray,
    colors: Sequence[str],
    labels: Sequence[str],
    *,
    bottom: float,
    ceiling: float,
    log: bool,
    clipped: bool = False,
    rotation: float = 0.0,
    show_labels: bool = True,
) -> None:
    """Grouped bars from `bottom`: one group per row of `values` (a model, labelled by `labels`), one bar per
    column (a condition, coloured by `colors`). Undefined (non-finite) values are hatched unfilled bars up to
    `ceiling`. With `clipped` (log axes only), bars above the ceiling stop there with their value written
    above, a dotted line marks the ceiling, and the axis leaves room for the values."""
    if clipped and not log:
        raise ValueError("clipped bars need a log axis")
    n_groups, n_bars = values.shape
    width = 0.8 / n_bars
    centres = np.arange(n_groups)
    for j in range(n_bars):
        x = centres + (j - (n_bars - 1) / 2) * width
        column = values[:, j]
        defined = np.isfinite(column)
        heights = np.clip(column[defined], bottom, ceiling)  # zero (a perfect KL) stays at the bottom of a log axis
        ax.bar(x[defined], heights - bottom, width, bottom=bottom, color=colors[j], linewidth=0)
        ax.bar(
            x[~defined],
            ceiling - bottom,
            width,
            bottom=bottom,
            fill=False,
            hatch=UNDEFINED_HATCH,
            edgecolor=colors[j],
            linewidth=0.6,
        )
        above = defined & (column > ceiling)
        for xi, value in zip(x[above], column[above], strict=True):
            ax.text(xi, ceiling * 1.15, _short(value), rotation=90, ha="center", va="bottom", fontsize=5.5)
    top = ceiling * (CLIPPED_HEADROOM if clipped else 1.0)
    if log:
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis, math.log10(top / bottom))
    ax.set_ylim(bottom, top)
    if clipped:
        ax.axhline(ceiling, color="black", linestyle=":", linewidth=0.7)
    ax.set_xlim(-0.5, n_groups - 0.5)
    ax.set_xticks(centres)
    if show_labels:
        ax.set_xticklabels(labels, rotation=rotation, ha="right" if 0 < rotation < 90 else "center", fontsize=7)
    else:
        ax.tick_params(axis="x", labelbottom=False)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", which="major", linewidth=0.4, alpha=0.5)
    ax.set_axisbelow(True)


def panel_label_rotation(labels: Sequence[str], angle: float = 90.0) -> float:
    """The rotation of a bar panel's group labels: `angle` beyond three groups, which would overlap flat."""
    return angle if len(labels) > 3 else 0.0


def bar_panels(n_panels: int, columns: int, labels: Sequence[str], n_bars: int) -> tuple:
    """(figure, axes) of `n_panels` grouped-bar panels in rows of `columns`, each sized for one group per label
    of `labels` with `n_bars` bars; the grid's unused axes are hidden and left out of `axes`."""
    rows = -(-n_panels // columns)
    panel_width = min(3.6, max(3.0, 0.9 + 0.12 * len(labels) * n_bars))  # two panels fit 7.2 in
    label_height = 0.09 * max(len(label) for label in labels) if panel_label_rotation(labels) else 0.3
    figure, axes = plt.subplots(
        rows,
        columns,
        figsize=(panel_width * columns, 2.2 * rows + label_height + 0.5),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return figure, list(axes.flat[:n_panels])


def condition_colors(conditions: Sequence[str]) -> dict[str, str]:
    """A colour per condition: the fixed one of a known condition, the next of CYCLE otherwise."""
    others = iter(CYCLE * (1 + len(conditions) // len(CYCLE)))
    return {c: CONDITION_COLORS[c] if c in CONDITION_COLORS else next(others) for c in conditions}


def save_figure(figure, name: str, directory: str | Path) -> list[Path]:
    """Write `figure` as `{directory}/{name}.pdf` and `.png`; returns both paths. PDFs embed TrueType fonts
    (Type 42), which conference checks accept, instead of matplotlib's default Type 3, and no creation date, so
    that the same results give the same bytes."""
    paths = []
    for suffix, metadata in (("pdf", {"CreationDate": None}), ("png", {})):
        path = Path(directory) / f"{name}.{suffix}"
        with atomic_path(path) as tmp, plt.rc_context({"pdf.fonttype": 42}):
            figure.savefig(tmp, format=suffix, dpi=150, bbox_inches="tight", metadata=metadata)
        paths.append(path)
    plt.close(figure)
    return paths


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average, so that noisy per-batch losses show their trend."""
    window = max(1, min(window, len(values)))
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (sums[1:] - sums[np.maximum(np.arange(1, len(values) + 1) - window, 0)]) / counts


def training_curves(logs: Mapping[tuple[str, str], str | Path], model_titles: Mapping[str, str]):
    """Training loss against optimizer step: one panel per model, one line per recipe.

    `logs` maps (model, recipe) to a `train_log.jsonl`. Each recipe's loss has its own scale (a KL for
    soft, a cross-entropy for hard), so each line is drawn on a log axis with its raw points faint.
    """
    models = list(dict.fromkeys(model for model, _ in logs))
    columns = min(4, len(models))
    rows = -(-len(models) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        for (owner, recipe), path in logs.items():
            if owner != model:
                continue
            records = read_jsonl(path)
            steps = np.array([r["step"] for r in records])
            losses = np.array([r["loss"] for r in records])
            (line,) = ax.plot(steps, _smooth(losses, max(1, len(losses) // 20)), label=recipe)
            ax.plot(steps, losses, color=line.get_color(), alpha=0.2, linewidth=0.6)
        ax.set_title(model_titles.get(model, model), fontsize=9)
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.set_ylabel("training loss", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(models) :]:
        ax.set_visible(False)
    figure.tight_layout()
    return figure


def render_training_curves(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]):
    """The registry's renderer (calibft.artifacts.registry): the train logs of `settings["train_runs"]`."""
    logs = {tuple(run): path for run, path in zip(settings["train_runs"], inputs["train_logs"], strict=True)}
    return training_curves(logs, settings["model_titles"])
