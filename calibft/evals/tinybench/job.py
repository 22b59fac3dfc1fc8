"""The TinyBenchmarks evaluation's job and defaults (`python -m calibft.evals.tinybench JOB` reads it as JSON;
`calibft.pipeline.jobs.tinybench_job` builds it). Free of torch, so that the workflow can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from calibft.core.checks import check_choice
from calibft.evals.job import ModelJob
from calibft.evals.tinybench.tasks import TINYBENCH_TASKS

TINYBENCH_BATCH_SIZE = 8
TINYBENCH_MAX_NEW_TOKENS = 256


@dataclass(frozen=True, kw_only=True)
class TinyBenchJob(ModelJob):
    """Every TinyBenchmarks task of one model and condition, so that the model is loaded once.

    GSM8K asks for greedy decoding, so `sampling` must stay empty; the decoding in force is
    `calibft.evals.tinybench.runner.gsm8k_decoding` (under the switch `generation_defaults: checkpoint`, sampling
    where the checkpoint's generation config says so), seeded from `seed` when it samples.
    """

    tasks: dict[str, str]  # task (a key of TINYBENCH_TASKS) -> its dataset split as JSON lines, one row per line
    irt_params: str | None = None  # the tinyBenchmarks parameters: with them, summary.json holds each task's gp-IRT
    sampling: dict = field(default_factory=dict)
    batch_size: int = TINYBENCH_BATCH_SIZE
    max_new_tokens: int = TINYBENCH_MAX_NEW_TOKENS
    # GSM8K under protocol switch answer_reasoning: release: the release removes this model's <think> blocks before
    # extraction (its Qwen3 family; calibft.evals.tinybench.gsm8k.gsm8k_text)
    release_strips_thinking: bool = False

    def __post_init__(self):
        super().__post_init__()
        if not self.tasks:
            raise ValueError("tasks must name at least one task and its items file")
        for task in self.tasks:
            check_choice("task", task, TINYBENCH_TASKS)
        if self.sampling:
            raise ValueError(f"TinyBenchmarks decodes greedily; sampling must be empty, got {self.sampling}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
