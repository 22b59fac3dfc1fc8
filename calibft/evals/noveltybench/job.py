"""NoveltyBench's two jobs: generating the answers (`GenerationJob`) and scoring them (`ScoringJob`); `python -m
calibft.evals.noveltybench generate|score JOB` reads them as JSON and `calibft.pipeline.jobs.generation_job` and
`scoring_job` build them. Free of torch, so that the workflow can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from calibft.core.protocol import check_protocol, default_protocol
from calibft.evals.job import ModelJob


@dataclass(frozen=True, kw_only=True)
class GenerationJob(ModelJob):
    """NoveltyBench: `samples_per_prompt` answers to every prompt of one split (its first `max_prompts`)."""

    split: str  # "curated" or "wildchat"
    prompts_file: str
    max_prompts: int | None = None
    # under protocol switch answer_reasoning: release, the release removes this model's <think> blocks from each
    # generation (its Qwen3 family; calibft.lm.chat.strip_model_response)
    release_strips_thinking: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.max_prompts is not None and self.max_prompts < 1:
            raise ValueError(f"max_prompts must be >= 1 or None, got {self.max_prompts}")

    def checkpoint_defaults(self) -> bool:
        """Switch `noveltybench_sampling`: `vllm_backend` samples at the configured temperature and top-p whatever
        the checkpoint's generation config holds, as the release's vLLM backend asks for them explicitly;
        `hf_backend` follows `generation_defaults`, as every other sampled evaluation does."""
        if self.protocol["noveltybench_sampling"] == "vllm_backend":
            return False
        return super().checkpoint_defaults()


@dataclass(frozen=True)
class ScoringJob:
    """NoveltyBench: the evaluators and the generations of one (model, condition, split)."""

    model_key: str
    condition: str
    split: str
    generations: str  # generations.jsonl.gz of the GenerationJob
    classifier: str  # the similarity classifier: Hugging Face id or folder
    classifier_tokenizer: str
    reward_model: str  # a sequence-classification reward model with a chat template
    precision: str
    out_dir: str
    reward_batch_size: int = 8
    checkpoint_dir: str | None = None
    protocol: dict = field(default_factory=default_protocol)  # every switch's value (calibft.core.protocol)

    def __post_init__(self):
        check_protocol(self.protocol)
