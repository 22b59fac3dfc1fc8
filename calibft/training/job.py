"""A training run's job (`python -m calibft.training.train JOB` reads it as JSON): what it trains, on what, and
where it writes. `calibft.pipeline.jobs.train_job` builds it from the config; free of torch, so that the workflow
can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calibft.core.protocol import check_protocol, default_protocol


@dataclass(frozen=True)
class Recipe:
    """A training recipe: one entry of the config's `recipes`."""

    objective: str  # soft: trie KL against the target; hard: cross-entropy on sampled canonical strings
    space: str  # the output space (a key of the config's `output_spaces`) that it trains on
    epochs: int
    samples_per_prompt: int
    temperature: float = 1.0  # the soft objective's logits are divided by it
    max_steps: int | None = None  # a cap on the optimizer steps (the demo's budgets)


@dataclass(frozen=True)
class TrainingSettings:
    """What every recipe shares: the config's `training` section."""

    lora: dict[str, Any]  # r, alpha, dropout, target_modules: the adapter's peft settings (`lm.models.attach_lora`)
    learning_rate: float
    weight_decay: float
    warmup_fraction: float  # linear warmup over this share of the steps, then cosine decay
    per_device_batch_size: int
    gradient_accumulation: int
    max_seq_len: int
    precision: str  # bf16 or fp32 (the CPU trains in fp32 whatever it says)
    distributed: str  # fsdp or ddp, across the GPUs of one node
    checkpoint_every: int  # optimizer steps between resumable checkpoints
    kl_probe_paths: int  # paths per unseen prompt for the before/after KL of run.json
    stop_before_time_limit: float = 10  # minutes before a Slurm job's time limit at which the run stops


@dataclass(frozen=True)
class TrainJob:
    """Everything one training run needs. `recipe` and `training` may be given as the config's mappings (as the
    job's JSON holds them); they are read into their dataclasses, and `protocol` must give every switch a value,
    so that a misspelt setting or switch fails here."""

    model: str  # Hugging Face id or folder
    tokenizer: str
    chat: dict
    recipe: Recipe
    training: TrainingSettings
    seed: int
    train_data: str  # soft: the trie set of the train split; hard: its output-space set
    probe_tries: str  # tries of the unseen prompts on the evaluation target, for the KL in run.json
    out_dir: str  # results/adapters/{model}/{recipe}
    checkpoint_dir: str  # survives a failed job, unlike the outputs
    protocol: dict = field(default_factory=default_protocol)  # every switch's value (calibft.core.protocol)
    # processes that train together (one per GPU): they set the global batch and the steps, so a change reruns
    world_size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.recipe, dict):
            object.__setattr__(self, "recipe", Recipe(**self.recipe))
        if isinstance(self.training, dict):
            object.__setattr__(self, "training", TrainingSettings(**self.training))
        check_protocol(self.protocol)


def training_processes(entry: dict) -> int:
    """The processes of a model's training run: one per GPU of its `resources`, one on the CPU."""
    return max(1, entry["resources"]["gpus"])
