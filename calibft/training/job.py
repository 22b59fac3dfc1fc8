"""A training run's job (`python -m calibft.training.train JOB` reads it as JSON): what it trains, on what, and
where it writes. `calibft.pipeline.jobs.train_job` builds it from the config; free of torch, so that the workflow
can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from calibft.core.protocol import default_protocol


@dataclass(frozen=True)
class TrainJob:
    """Everything one training run needs."""

    model: str  # Hugging Face id or folder
    tokenizer: str
    chat: dict
    recipe: dict  # objective, epochs, samples_per_prompt, temperature, max_steps
    training: dict  # the config's `training` section
    seed: int
    train_data: str  # soft: the trie set of the train split; hard: its output-space set
    probe_tries: str  # tries of the unseen prompts on the evaluation target, for the KL in run.json
    out_dir: str  # results/adapters/{model}/{recipe}
    checkpoint_dir: str  # survives a failed job, unlike the outputs
    protocol: dict = field(default_factory=default_protocol)  # every switch's value (calibft.core.protocol)
    # processes that train together (one per GPU): they set the global batch and the steps, so a change reruns
    world_size: int = 1


def training_processes(entry: dict) -> int:
    """The processes of a model's training run: one per GPU of its `resources`, one on the CPU."""
    return max(1, entry["resources"]["gpus"])
