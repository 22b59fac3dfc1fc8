"""The job of the exact distribution and its comparison with the structured samples (`python -m calibft.evals.exact
JOB` reads it as JSON; `calibft.pipeline.jobs.exact_job` builds it). Free of torch, so that the workflow can import
it to plan."""

from __future__ import annotations

from dataclasses import dataclass

from calibft.evals.job import ModelJob


@dataclass(frozen=True, kw_only=True)
class ExactJob(ModelJob):
    """The exact distribution of one condition over the evaluation space of one split, and how the structured
    samples of the same run compare with it (`calibft.evals.exact`).

    `sampling` is the structured evaluation's, so that the exact distribution is the one its samples come from
    (temperature and top-p in force, `ModelJob.settings`)."""

    split: str  # "unseen" or "ood"
    tries: str  # the split's tries of the evaluation space, for the model's tokenizer
    space: str  # the split's evaluation space: the values' strings and target probabilities
    samples: str  # samples.jsonl.gz of the structured evaluation of the same model, condition and split
    prompt_ids: list[str] | None = None  # the structured evaluation's; None: every prompt
    batch_nodes: int = 256  # trie nodes fed together (calibft.lm.trie_walk)
    spread_draws: int = 2000  # simulated sample sets per prompt behind the sampling spread (10 in each 0.5% tail)
    # where the adaptive walk may stop (calibft.evals.exact.bounds.Tolerance): the widths of the bounds on the
    # normalized W1 and on the mass on the space; zero walks the whole trie
    w1_norm_tolerance: float = 0.0
    mass_tolerance: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        if self.batch_nodes < 1:
            raise ValueError(f"batch_nodes must be >= 1, got {self.batch_nodes}")
        if self.spread_draws < 2:
            raise ValueError(f"spread_draws must be >= 2 (a spread needs several draws), got {self.spread_draws}")
        for name in ("w1_norm_tolerance", "mass_tolerance"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
