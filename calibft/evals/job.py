"""What every evaluation's job shares (`ModelJob`): the model under test, how to sample from it, and where the
evaluation writes. Each evaluation's own job extends it in the evaluation's package, next to its runner
(`calibft.evals.structured.job` beside `calibft.evals.structured.runner`, and so on); `calibft.pipeline.jobs` builds
them from the config.

The workflow imports the jobs to plan, so this module does not import torch: the two methods that need the
sampling engine import it when they are called.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from calibft.core.protocol import check_protocol, default_protocol
from calibft.core.provenance import write_provenance
from calibft.lm.chat import ChatOptions, on_chat_date
from calibft.lm.generation_defaults import effective_settings, engine_settings, release_request
from calibft.lm.models import load_for_inference, load_tokenizer


@dataclass(frozen=True, kw_only=True)
class ModelJob:
    """What every evaluation of a model shares: the model under test and how to sample from it. Each evaluation's
    job adds its own fields (keyword-only, so that base and job fields may come in any order).

    `calibft.pipeline.jobs.under_test` fills these fields from the config."""

    model: str  # Hugging Face id or folder
    model_key: str  # the model's key in the config: part of every prompt's seed
    tokenizer: str
    chat: dict  # the model's `chat:` entry
    condition: str  # "base" or a recipe name
    seed: int
    precision: str
    sampling: dict  # samples_per_prompt, max_new_tokens, temperature, top_p, batch_size
    out_dir: str
    adapter: str | None = None  # the recipe's adapter folder; None for the base model
    checkpoint_dir: str | None = None  # per-prompt results of an interrupted attempt, kept until the job ends
    protocol: dict = field(default_factory=default_protocol)  # every switch's value (calibft.core.protocol)

    def __post_init__(self):
        check_protocol(self.protocol)

    def checkpoint_generation_config(self) -> dict | None:
        """The checkpoint's own generation_config.json: from its folder, or from the Hugging Face cache where
        loading the model put it; None when it has none."""
        folder = Path(self.model)
        if folder.is_dir():
            path = folder / "generation_config.json"
            return json.loads(path.read_text()) if path.is_file() else None
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(self.model, "generation_config.json")
        return json.loads(Path(path).read_text()) if isinstance(path, str) else None

    def checkpoint_defaults(self) -> bool:
        """Whether the checkpoint's generation config fills in the request, as transformers 4.57.6 does in the
        release's HF backend: switch `generation_defaults: checkpoint`."""
        return self.protocol["generation_defaults"] == "checkpoint"

    def generation(self, sampling: bool = True) -> dict:
        """The generation settings in force (`calibft.lm.generation_defaults.effective_settings`): exactly the
        requested ones, or (`checkpoint_defaults`) what transformers 4.57.6 puts back from the checkpoint's
        generation config when the release asks for them."""
        checkpoint = self.checkpoint_generation_config()
        temperature, top_p = self.sampling.get("temperature", 1.0), self.sampling.get("top_p", 1.0)
        request = release_request(checkpoint, sampling, temperature, top_p)
        effective = effective_settings(checkpoint, request, fallback=self.checkpoint_defaults())
        return {key: value for key, value in effective.items() if key != "config"}

    def settings(self):
        """The sampling settings of the engine (`calibft.lm.generation.SamplingSettings`): the configured ones, or
        those the generation defaults put in force (for example temperature 0.6 and top_p 0.95 for Qwen3 under
        the release's protocol)."""
        from calibft.lm.generation import SamplingSettings

        sampling = dict(self.sampling)
        generation = self.generation()
        do_sample, temperature, top_p, top_k = engine_settings(generation)
        if not do_sample or top_k is not None:
            raise ValueError(f"{self.model}: the generation settings in force are not plain sampling: {generation}")
        sampling.update(temperature=temperature, top_p=top_p)
        return SamplingSettings(num_samples=sampling.pop("samples_per_prompt"), **sampling)

    def chat_options(self) -> ChatOptions:
        return on_chat_date(ChatOptions.from_config(self.chat), self.protocol["chat_date"])

    def load(self):
        """(tokenizer, model in eval mode with the condition's adapter)."""
        return load_tokenizer(self.tokenizer), load_for_inference(self.model, self.precision, self.adapter)

    def seed_of(self, evaluation: str, prompt_key: str) -> int:
        """The seed of one prompt's samples: the same in every attempt, independent of the other prompts."""
        from calibft.lm.generation import seed_for

        return seed_for(self.seed, evaluation, self.model_key, self.condition, prompt_key)

    def write_provenance(self, model, tokenizer, generation: dict | None, **inputs: str | None) -> None:
        """provenance.json in the output folder (`calibft.core.provenance`), with the generation settings in force
        (None for an evaluation that does not generate) and the input files that are given."""
        if generation is not None:
            print(f"generation settings in force: {json.dumps(generation)}", file=sys.stderr)
        given = {name: path for name, path in inputs.items() if path is not None}
        write_provenance(
            self.out_dir, self, generation=generation, model=model, tokenizer=tokenizer, inputs=given,
            seeds={"seed": self.seed},
        )  # fmt: skip

    def header(self, evaluation: str, **extra) -> dict:
        """The fields that open every metrics.json and summary.json: what was evaluated and the resolved job."""
        return {
            "evaluation": evaluation,
            "model": self.model_key,
            "condition": self.condition,
            **extra,
            "job": asdict(self),
        }
