"""The open-ended evaluation's job and thresholds (`python -m calibft.evals.open_ended JOB` reads it as JSON;
`calibft.pipeline.jobs.open_ended_job` builds it). Free of torch, so that the workflow can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from calibft.evals.job import ModelJob

OPEN_ENDED_THRESHOLDS: tuple[float, ...] = tuple(i / 100 for i in range(1, 100))  # 0.01, 0.02, ..., 0.99
OPEN_ENDED_HEADLINE_THRESHOLD = 0.9


@dataclass(frozen=True, kw_only=True)
class OpenEndedJob(ModelJob):
    """Random generation from the open-ended prompts, and the support of the first token."""

    prompts_file: str  # the authors' JSON array (`calibft.pipeline.assets.OPEN_ENDED_PROMPTS`)
    thresholds: list[float] = field(default_factory=lambda: list(OPEN_ENDED_THRESHOLDS))
    headline_threshold: float = OPEN_ENDED_HEADLINE_THRESHOLD

    def __post_init__(self):
        super().__post_init__()
        if self.headline_threshold not in self.thresholds:
            raise ValueError(f"headline_threshold {self.headline_threshold} must be one of the thresholds")
