"""The construction-cost table of the output-space grid (paper tab:grid-granularity)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from calibft.artifacts.tables import Table
from calibft.data.granularity import ConstructionCost, read_costs

CAPTION = (
    "Construction cost for the discretization-precision grid profiled in the granularity sweep. We report mean "
    "output-space and trie construction times across {prompts} prompts ({splits}) with the {tokenizer} tokenizer"
    "{tokenizer_details}, together with the worst per-prompt tracemalloc peak for output-space construction and trie "
    "construction. The shaded row marks the shared high-resolution evaluation reference."
)


def grid_granularity_table(
    costs: Sequence[ConstructionCost], reference: tuple[int, int], metadata: Mapping[str, Any]
) -> Table:
    """One row per (decimals, max bins); `reference` (decimals, max bins), the evaluation's space, is shaded.

    The tokenizer the tries were built with (`metadata["tokenizer"]`, its config key) ends every row, since the
    `.csv` and `.md` carry no caption; the caption names it too, with where it was loaded from and its size where
    the metadata has them (`tokenizer_source`, `vocabulary`).
    """
    tokenizer = metadata.get("tokenizer", "?")
    frame = pd.DataFrame(
        {
            "d": [c.decimals for c in costs],
            "max bins": [c.max_bins for c in costs],
            "mean output-space time (s)": [c.mean_space_s for c in costs],
            "mean trie time (s)": [c.mean_trie_s for c in costs],
            "worst output-space peak (MB)": [c.worst_space_peak_mb for c in costs],
            "worst trie peak (MB)": [c.worst_trie_peak_mb for c in costs],
            "mean strings": [c.mean_values for c in costs],
            "mean trie nodes": [c.mean_trie_nodes for c in costs],
            "tokenizer": [tokenizer] * len(costs),
        }
    )
    caption = CAPTION.format(
        prompts=costs[0].prompts if costs else 0,
        splits=", ".join(metadata.get("splits", [])),
        tokenizer=tokenizer,
        tokenizer_details=tokenizer_details(metadata),
    )
    return Table(
        frame,
        label="tab:grid-granularity",
        caption=caption,
        code=["tokenizer"],
        formats={
            "mean output-space time (s)": ".3f",
            "mean trie time (s)": ".3f",
            "worst output-space peak (MB)": ".1f",
            "worst trie peak (MB)": ".1f",
            "mean strings": ".0f",
            "mean trie nodes": ".0f",
        },
        shaded=[(c.decimals, c.max_bins) == tuple(reference) for c in costs],
        wide=True,
    )


def tokenizer_details(metadata: Mapping[str, Any]) -> str:
    """` (source, N tokens)` of the tokenizer in the metadata of `write_costs`, with what of it is there; empty for
    costs written before the sweep recorded them."""
    details = [str(metadata["tokenizer_source"])] if metadata.get("tokenizer_source") else []
    if metadata.get("vocabulary"):
        details.append(f"{int(metadata['vocabulary']):,} tokens")
    return f" ({', '.join(details)})" if details else ""


def render_grid_granularity(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    """The registry's renderer (calibft.artifacts.registry): the costs the granularity job measured."""
    (costs_file,) = inputs["granularity"]
    costs, metadata = read_costs(costs_file)
    return grid_granularity_table(costs, tuple(settings["reference"]), metadata)
