"""A table over several seeds: the renderer's table of each seed's runs, combined into one that shows each number's
mean over the seeds and their standard deviation.

    table = render_artifact(artifact("main_ood"), [inputs_of_seed_11, inputs_of_seed_12], settings)

The combined table (`combine_seeds`) keeps the first seed's layout, text and formats; every number column holds
the mean over seeds (undefined where any seed's is) and `Table.spread` their standard deviation. A cell is bold
where every seed's table bolds it. Its interval covers every seed: from the lowest to the highest bound of the
seeds' bootstrap intervals, or of the seeds' values where a seed's cell has no interval. The paper reports one
seed's run, so the question a reproduction asks of a cell is whether the paper's number is one that a seed
could have produced, and the interval answers it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from calibft.artifacts.registry import Artifact
from calibft.artifacts.runs import join_words
from calibft.artifacts.tables import Table


def render_artifact(row: Artifact, per_seed: Sequence[Mapping[str, Sequence[str]]], settings: Mapping[str, Any]):
    """The artifact of `row` from the inputs of each seed it shows (`calibft.pipeline.artifact_inputs.seed_inputs`): its
    renderer's output for one seed, the seeds' tables combined for several."""
    render = row.render_function()
    rendered = [render(inputs, settings) for inputs in per_seed]
    if len(rendered) == 1:
        return rendered[0]
    return combine_seeds(rendered, settings["seeds"])


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _bounds(table: Table) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of every cell: its interval where it has one, its value otherwise (NaN where undefined)."""
    values = table.frame.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    low, high = values.copy(), values.copy()
    if table.intervals is not None:
        for (r, c), span in np.ndenumerate(table.intervals.to_numpy(dtype=object)):
            if span is not None and not np.isnan(values[r, c]):
                low[r, c], high[r, c] = span
    return low, high


def combine_seeds(tables: Sequence[Table], seeds: Sequence[int]) -> Table:
    """One table from the same renderer's tables of `seeds` (the module's docstring)."""
    first = tables[0]
    if len(tables) != len(seeds):
        raise ValueError(f"{first.label}: {len(tables)} tables for seeds {list(seeds)}")
    for seed, table in zip(seeds, tables, strict=True):
        if table.label != first.label or not table.frame.columns.equals(first.frame.columns):
            raise ValueError(f"{first.label}: the table of seed {seed} has other columns or another label")
        if table.frame.shape != first.frame.shape:
            shape, expected = table.frame.shape, first.frame.shape
            raise ValueError(f"{first.label}: the table of seed {seed} has shape {shape}, not {expected}")
    numbers = [i for i in range(first.frame.shape[1]) if all(_is_number(t.frame.iloc[:, i]) for t in tables)]
    for i in set(range(first.frame.shape[1])) - set(numbers):
        for seed, table in zip(seeds, tables, strict=True):
            if not table.frame.iloc[:, i].equals(first.frame.iloc[:, i]):
                raise ValueError(
                    f"{first.label}: column {first.frame.columns[i]!r} holds text that differs between seeds "
                    f"{seeds[0]} and {seed}; only numbers are combined over seeds"
                )
    stacked = np.stack([t.frame.iloc[:, numbers].to_numpy(dtype=float) for t in tables])
    frame, spread = first.frame.copy(), pd.DataFrame(np.nan, first.frame.index, first.frame.columns)
    for j, i in enumerate(numbers):
        frame.isetitem(i, stacked[:, :, j].mean(axis=0))
        spread.isetitem(i, stacked[:, :, j].std(axis=0, ddof=1))
    bounds = [_bounds(t) for t in tables]
    low, high = np.min([b[0] for b in bounds], axis=0), np.max([b[1] for b in bounds], axis=0)
    intervals = pd.DataFrame(np.full(first.frame.shape, None, dtype=object), first.frame.index, first.frame.columns)
    for r, c in zip(*np.nonzero(~np.isnan(low) & ~np.isnan(high)), strict=True):
        if c in numbers:
            intervals.iat[r, c] = [float(low[r, c]), float(high[r, c])]
    bold = None
    if any(t.bold is not None for t in tables):
        bold = pd.DataFrame(
            np.logical_and.reduce([t.bold.to_numpy(dtype=bool) if t.bold is not None else False for t in tables]),
            first.frame.index,
            first.frame.columns,
        )
    caption = (
        f"{first.caption} Mean over seeds {join_words([str(s) for s in seeds])} ± their standard deviation; "
        "bold where every seed's table is bold."
    )
    return dataclasses.replace(first, frame=frame, spread=spread, intervals=intervals, bold=bold, caption=caption)
