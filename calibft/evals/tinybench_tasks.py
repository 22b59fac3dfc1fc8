"""The five tiny benchmarks as data: each task's Hugging Face dataset and how its items are scored
(`calibft.evals.tinybench` scores them). Free of torch, so that the workflow can read it when it parses."""

from __future__ import annotations

from dataclasses import dataclass


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
