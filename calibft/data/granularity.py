"""What output spaces and tries cost to build, over a grid of decimals and max bins (paper tab:grid-granularity).

For every (decimals, max bins) setting and every prompt of a suite, the output space is built from the law
(`build_output_space`) and its trie from the space (`tokenize_values` of its strings, then `build_trie`), one
prompt at a time, as a user building a single prompt would. Each step is timed in one pass and its Python
allocation peak (tracemalloc, which slows what it traces) measured in a second pass. The paper reports the mean
time per prompt and the worst per-prompt peak of each step.
"""

from __future__ import annotations

import json
import os
import platform
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from calibft.core.io import write_json
from calibft.data.grid import Prompt
from calibft.data.output_space import build_output_space, check_space_settings
from calibft.data.trie import trie_of_space


@dataclass(frozen=True)
class ConstructionCost:
    """One row of the table: a setting, over `prompts` prompts."""

    decimals: int
    max_bins: int
    prompts: int
    mean_space_s: float
    mean_trie_s: float
    worst_space_peak_mb: float
    worst_trie_peak_mb: float
    mean_values: float  # strings per output space
    mean_trie_nodes: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def timed_with_peak(build: Callable[[], Any]) -> tuple[Any, float, float]:
    """What `build()` returns and its wall seconds, then the tracemalloc peak (MB) of a second `build()`."""
    start = time.perf_counter()
    result = build()
    seconds = time.perf_counter() - start
    tracemalloc.start()
    try:
        build()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, seconds, peak / 2**20


def construction_cost(tokenizer, prompts: Sequence[Prompt], decimals: int, max_bins: int) -> ConstructionCost:
    """The cost of building every prompt's output space and trie at one setting."""
    check_space_settings(decimals, max_bins)
    if not prompts:
        raise ValueError("construction_cost needs at least one prompt")
    space_s, space_mb, trie_s, trie_mb, values, nodes = (np.zeros(len(prompts)) for _ in range(6))
    for i, p in enumerate(prompts):
        space, space_s[i], space_mb[i] = timed_with_peak(
            lambda p=p: build_output_space(p.family, p.params, decimals, max_bins)
        )
        trie, trie_s[i], trie_mb[i] = timed_with_peak(lambda space=space: trie_of_space(tokenizer, space))
        values[i], nodes[i] = len(space.values), trie.num_nodes
    return ConstructionCost(
        decimals=decimals,
        max_bins=max_bins,
        prompts=len(prompts),
        mean_space_s=float(space_s.mean()),
        mean_trie_s=float(trie_s.mean()),
        worst_space_peak_mb=float(space_mb.max()),
        worst_trie_peak_mb=float(trie_mb.max()),
        mean_values=float(values.mean()),
        mean_trie_nodes=float(nodes.mean()),
    )


def construction_costs(
    tokenizer, prompts: Sequence[Prompt], decimals: Sequence[int], max_bins: Sequence[int]
) -> list[ConstructionCost]:
    """One row per (decimals, max bins), decimals outer, in the order given."""
    settings = [(d, b) for d in decimals for b in max_bins]
    return [
        construction_cost(tokenizer, prompts, d, b)
        for d, b in tqdm(settings, desc="granularity", unit="setting", mininterval=2)
    ]


def write_costs(path, costs: Sequence[ConstructionCost], **metadata: Any) -> None:
    """The rows and what they were measured with (tokenizer, prompts, machine) as one JSON file."""
    write_json(path, {**metadata, "machine": machine(), "rows": [cost.to_dict() for cost in costs]})


def read_costs(path) -> tuple[list[ConstructionCost], dict[str, Any]]:
    """The rows and the metadata that `write_costs` wrote."""
    data = json.loads(Path(path).read_text())
    return [ConstructionCost(**row) for row in data.pop("rows")], data


def machine() -> dict[str, Any]:
    """Where the times were taken: they mean little without it."""
    return {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()}
