"""The training ablations of appendix C: tab:grid-ablation (soft-target recipes over decimals and max bins) and
tab:hard-label-ablation (hard-target recipes over decimals, max bins, samples per prompt and epochs).

Every recipe is evaluated like the main ones, on the structured benchmark against the shared evaluation target,
and its row shows the aggregate normalized W1 (the median over families of the family means) on held-out
families and on unseen parameters. Bold: the best row of each model and split; shaded: the final recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from calibft.artifacts.formats import format_w1
from calibft.artifacts.runs import aggregate_intervals, aggregates, read_runs_by_split
from calibft.artifacts.tables import Table, best_cells

SPLIT_COLUMNS = {"ood": "OOD W₁ ↓", "unseen": "Unseen W₁ ↓"}

GRID_CAPTION = (
    "Ablation over the granularity of the canonical numeric output space for soft-target fine-tuning. Rows vary "
    "the number of decimal places d and the cap on the number of support bins used during training. All "
    "checkpoints are evaluated against the shared reference with d={decimals} and max bins={max_bins}. Results are "
    "Q95-Q05 normalized Wasserstein-1, averaged within family and then aggregated across families with a median. "
    "The shaded row is the final setting; bold marks the best setting for each model and split."
)
HARD_CAPTION = (
    "Hard-target fine-tuning ablation. Rows vary the output space (d, max bins) and the sparse-supervision budget "
    "(samples per prompt per epoch, epochs), with the total number of sampled draws per prompt explicit. All "
    "checkpoints are evaluated against the shared reference with d={decimals} and max bins={max_bins}. Results are "
    "Q95-Q05 normalized Wasserstein-1, averaged within family and then aggregated across families with a median. "
    "The shaded row is the final setting; bold marks the best setting for each model and split."
)

Metrics = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model -> recipe -> metrics.json


def recipe_columns(recipe: Mapping[str, Any], space: Mapping[str, Any], objective: str) -> dict[str, int]:
    """The settings a row shows: d and max bins of the recipe's space, and for hard recipes its budget."""
    columns = {"d": space["decimals"], "max bins": space["max_bins"]}
    if objective == "hard":
        spp, epochs = recipe["samples_per_prompt"], recipe["epochs"]
        columns |= {"spp": spp, "epochs": epochs, "total draws": spp * epochs}
    if recipe.get("max_steps") is not None:  # a cut budget (the demo's) is shown, not hidden behind the draws
        columns["max steps"] = recipe["max_steps"]
    return columns


def ablation_table(
    metrics_by_split: Mapping[str, Metrics],
    recipes: Sequence[str],
    settings: Mapping[str, Mapping[str, int]],
    objective: str,
    final: str,
    model_titles: Mapping[str, str],
    reference: Mapping[str, int],
) -> Table:
    """One row per (model, recipe), models in the metrics' order and recipes in the order of `recipes`;
    `settings[recipe]` are its `recipe_columns`, `reference` the evaluation space's decimals and max_bins."""
    if objective not in ("soft", "hard"):
        raise ValueError(f"objective must be soft or hard, got {objective!r}")
    if not recipes:
        raise ValueError(f"no recipes for the {objective} ablation: list them in ablations.{objective}")
    models = list(next(iter(metrics_by_split.values())))
    # the settings' columns of every row ("---" where a recipe has no such setting, e.g. no step cap)
    setting_columns = list(dict.fromkeys(column for recipe in recipes for column in settings[recipe]))
    splits = [split for split in SPLIT_COLUMNS if split in metrics_by_split]  # OOD first, as in the paper
    rows, bold, shaded, intervals = [], [], [], []
    for model in models:
        # recipes x splits of this model (each run checked to be the split it stands for); bold: the best recipe
        runs = {split: {r: {split: metrics_by_split[split][model][r]} for r in recipes} for split in splits}
        values, spans = (
            pd.DataFrame({SPLIT_COLUMNS[s]: of(runs[s], "w1_norm", s, [s])[s] for s in splits})
            for of in (aggregates, aggregate_intervals)
        )
        best = best_cells(values.T, format_w1, lowest=True).T
        for recipe in recipes:
            shown = {column: settings[recipe].get(column) for column in setting_columns}
            rows.append({"Model": model_titles.get(model, model), **shown, **values.loc[recipe].to_dict()})
            bold.append({"Model": False, **dict.fromkeys(setting_columns, False), **best.loc[recipe].to_dict()})
            intervals.append({"Model": None, **dict.fromkeys(setting_columns), **spans.loc[recipe].to_dict()})
            shaded.append(recipe == final)
    frame = pd.DataFrame(rows)
    return Table(
        frame,
        label="tab:grid-ablation" if objective == "soft" else "tab:hard-label-ablation",
        caption=(GRID_CAPTION if objective == "soft" else HARD_CAPTION).format(**reference),
        formats={column: format_w1 for column in SPLIT_COLUMNS.values() if column in frame},
        bold=pd.DataFrame(bold, columns=frame.columns).astype(bool),
        shaded=shaded,
        intervals=pd.DataFrame(intervals, columns=frame.columns, dtype=object),
        wide=objective == "hard",
        font_size="footnotesize",
    )


def render_ablation_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    """The registry's renderer (calibft.artifacts.registry): the ablation's metrics files, split after split,
    each of every ablation model and recipe (models outer); `settings["ablation"]` as the workflow resolves it."""
    ablation = settings["ablation"]
    runs = [[model, recipe] for model in ablation["models"] for recipe in ablation["recipes"]]
    metrics_by_split = read_runs_by_split(inputs["ablation"], settings["splits"], runs)
    columns = {
        recipe: recipe_columns(entry, ablation["spaces"][recipe], ablation["objective"])
        for recipe, entry in ablation["recipes"].items()
    }
    reference = {"decimals": ablation["reference"]["decimals"], "max_bins": ablation["reference"]["max_bins"]}
    return ablation_table(
        metrics_by_split,
        list(ablation["recipes"]),
        columns,
        ablation["objective"],
        ablation["final"],
        settings["model_titles"],
        reference,
    )
