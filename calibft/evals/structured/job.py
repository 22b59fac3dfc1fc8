"""The job of the structured evaluation and of the SSOT baseline (`python -m calibft.evals.structured JOB` reads it
as JSON; `calibft.pipeline.jobs.structured_job` and `ssot_job` build it). Free of torch, so that the workflow can
import it to plan."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from calibft.evals.bootstrap import REPLICATES
from calibft.evals.job import ModelJob
from calibft.evals.structured import ssot

EVALUATIONS = ("structured", "ssot")


@dataclass(frozen=True, kw_only=True)
class StructuredJob(ModelJob):
    """Structured sampling (and its logit KL) of one condition on one split, or the SSOT baseline's."""

    evaluation: str  # "structured" or "ssot"
    split: str  # "unseen" or "ood"
    chat_overrides: dict = field(default_factory=dict)  # e.g. SSOT turns Qwen3's thinking on
    tries: str | None = None  # the logit-KL target of the split (structured only)
    prompt_ids: list[str] | None = None  # the prompts to evaluate, in the split's order; None: every prompt
    logit_kl_paths: int = 4
    logit_kl_batch_size: int = 16
    bootstrap_replicates: int = REPLICATES  # of each aggregate's interval (calibft.evals.bootstrap); 0: none
    system: str | None = None  # SSOT: its instruction
    answer_pattern: str | None = None  # SSOT: a regex whose first group is the answer
    # SSOT as the authors' release ran it (protocol switch ssot_prompt: release): its prompt file, read without
    # executing it, and the style that picks a prompt and answer rules (calibft.evals.structured.ssot); these
    # replace `system` and `answer_pattern`
    release_prompts: str | None = None
    release_style: str = "default"
    # SSOT under protocol switch answer_reasoning: release: the release removes this model's <think> blocks before
    # extraction (its Qwen3 family; calibft.lm.chat.strip_model_response)
    release_strips_thinking: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.evaluation not in EVALUATIONS:
            raise ValueError(f"evaluation must be one of {EVALUATIONS}, got {self.evaluation!r}")
        if self.answer_pattern is not None and re.compile(self.answer_pattern).groups < 1:
            raise ValueError(f"answer_pattern {self.answer_pattern!r} needs a group that captures the answer")
        if self.release_style not in ssot.STYLES:
            styles = ", ".join(ssot.STYLES)
            raise ValueError(f"release_style must be one of {styles}, got {self.release_style!r}")
