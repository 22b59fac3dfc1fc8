"""Figures: each saved as `{name}.pdf` (for the paper) and `{name}.png` (for a person), atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from calibft.io import atomic_path, read_jsonl

# Major ticks of a log axis at 1, 2, 3 and 5 of each decade: a range within one decade still has labels.
LOG_TICKS = (1.0, 2.0, 3.0, 5.0)


def plain_log_ticks(axis, decades: float = 1.0) -> None:
    """Label a log axis that spans `decades` at `LOG_TICKS` (at the powers of ten only beyond two decades),
    printed plainly (0.2, 0.3, 1, 2,000), without minor labels."""
    axis.set_major_locator(LogLocator(subs=LOG_TICKS if decades <= 2 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def save_figure(figure, name: str, directory: str | Path) -> list[Path]:
    """Write `figure` as `{directory}/{name}.pdf` and `.png`; returns both paths. PDFs embed TrueType fonts
    (Type 42), which conference checks accept, instead of matplotlib's default Type 3."""
    paths = []
    for suffix in ("pdf", "png"):
        path = Path(directory) / f"{name}.{suffix}"
        with atomic_path(path) as tmp, plt.rc_context({"pdf.fonttype": 42}):
            figure.savefig(tmp, format=suffix, dpi=150, bbox_inches="tight")
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
