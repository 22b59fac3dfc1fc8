"""The five tiny benchmarks as data: each task's Hugging Face dataset and how its items are scored
(`calibft.evals.tinybench.runner` scores them), and the lookups of a task (`task_spec`) and of a field of an
item's row (`item_field`). Free of torch, so that the workflow can read it when it parses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from calibft.core.checks import check_choice


@dataclass(frozen=True)
class Task:
    """One tiny benchmark: where its rows come from and how an item is scored."""

    dataset: str  # Hugging Face dataset id
    config: str | None  # its configuration (None: the default one)
    split: str
    kind: str  # "letters", "acc_norm", "mc2", "partial" (log-likelihood) or "generate"
    metrics: tuple[str, ...]  # the per-item metrics stored; the first is the item's `score`

    @property
    def loglik(self) -> bool:
        return self.kind != "generate"


TINYBENCH_TASKS: dict[str, Task] = {
    "mmlu": Task("tinyBenchmarks/tinyMMLU", "all", "test", "letters", ("acc",)),
    "hellaswag": Task("tinyBenchmarks/tinyHellaswag", None, "validation", "acc_norm", ("acc_norm", "acc")),
    "truthfulqa": Task("tinyBenchmarks/tinyTruthfulQA", "multiple_choice", "validation", "mc2", ("mc2",)),
    "winogrande": Task("tinyBenchmarks/tinyWinogrande", "winogrande_xl", "validation", "partial", ("acc",)),
    "gsm8k": Task("tinyBenchmarks/tinyGSM8k", "main", "test", "generate", ("strict", "flexible")),
}


def task_spec(task: str) -> Task:
    """The `Task` named `task`; ValueError for a name not in `TINYBENCH_TASKS`."""
    check_choice("task", task, TINYBENCH_TASKS)
    return TINYBENCH_TASKS[task]


def item_field(row: Mapping, name: str, index: int | None = None) -> Any:
    """`row[name]`; ValueError naming the item (its `index`, when given) and its fields when it has no `name`."""
    if name not in row:
        where = "" if index is None else f" {index}"
        raise ValueError(f"item{where} has no {name!r} field (fields: {', '.join(sorted(row))})")
    return row[name]
