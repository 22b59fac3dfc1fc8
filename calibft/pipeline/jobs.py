"""The workflow's jobs: one frozen dataclass per kind of job, each built from the config and its rule's wildcards
by its `from_config`, passed to its runner as JSON and read back there (`calibft.core.io.read_job`).

    job = StructuredJob.from_config(Layout(config, basedir), model="qwen3_8b", cond="soft", eval_split="unseen")
    json.dumps(dataclasses.asdict(job))  # what `python -m calibft.evals.structured JOB` reads

| job | runner |
|---|---|
| `TrainJob` | `calibft.training.train` |
| `StructuredJob` (structured sampling and the SSOT baseline) | `calibft.evals.structured` |
| `ExactJob` | `calibft.evals.exact_structured` |
| `OpenEndedJob` | `calibft.evals.open_ended` |
| `MCQJob` | `calibft.evals.mcq` |
| `GenerationJob`, `ScoringJob` | `calibft.evals.noveltybench_run` |
| `TinyBenchJob` | `calibft.evals.tinybench` |
| `PalomaJob` | `calibft.evals.paloma` |

The workflow imports this module to plan, so it does not import torch: the two methods of `ModelJob` that need
the sampling engine import it when they are called.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from calibft.core.checks import check_choice
from calibft.core.protocol import resolve
from calibft.core.provenance import write_provenance
from calibft.data.grid import evaluated_ids
from calibft.evals import ssot_release
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.tinybench_tasks import TINYBENCH_TASKS
from calibft.lm.chat import ChatOptions
from calibft.lm.generation_defaults import effective_settings, engine_settings, release_request
from calibft.lm.models import load_for_inference, load_tokenizer
from calibft.pipeline.layout import Layout


def _protocol() -> dict:
    return resolve(None)


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
    protocol: dict = field(default_factory=_protocol)  # every switch's value (calibft.core.protocol)
    # processes that train together (one per GPU): they set the global batch and the steps, so a change reruns
    world_size: int = 1

    @classmethod
    def from_config(cls, layout: Layout, model: str, recipe: str) -> TrainJob:
        config, entry = layout.config, layout.config["models"][model]
        return cls(
            model=layout.model_source(model),
            tokenizer=layout.tokenizer_source(entry["tokenizer"]),
            chat=entry["chat"],
            recipe=config["recipes"][recipe],
            training=config["training"],
            seed=layout.run_seed,
            train_data=layout.train_data(model, recipe),
            probe_tries=layout.probe_tries(model),
            out_dir=layout.adapter_folder(model, recipe),
            checkpoint_dir=layout.train_checkpoints(model, recipe),
            protocol=layout.protocol,
            world_size=training_processes(entry),
        )


def training_processes(entry: dict) -> int:
    """The processes of a model's training run: one per GPU of its `resources`, one on the CPU."""
    return max(1, entry["resources"]["gpus"])


@dataclass(frozen=True, kw_only=True)
class ModelJob:
    """What every evaluation of a model shares: the model under test and how to sample from it. Each evaluation's
    job adds its own fields (keyword-only, so that base and job fields may come in any order)."""

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
    protocol: dict = field(default_factory=_protocol)  # every switch's value (calibft.core.protocol)

    @staticmethod
    def under_test(
        layout: Layout, model: str, cond: str, sampling: dict, evaluation: str, *parts: str
    ) -> dict[str, Any]:
        """The ModelJob fields of `model` in condition `cond` (the base model or a recipe's adapter), writing into
        the folder of `evaluation` and its `parts` (`Layout.eval_folder`)."""
        config, entry = layout.config, layout.config["models"][model]
        return {
            "model": layout.model_source(model),
            "model_key": model,
            "tokenizer": layout.tokenizer_source(entry["tokenizer"]),
            "chat": entry["chat"],
            "condition": cond,
            "adapter": None if cond == "base" else layout.adapter_folder(model, cond),
            "seed": layout.run_seed,
            "protocol": layout.protocol,
            "precision": config["evaluation"]["precision"],
            "sampling": sampling,
            "out_dir": layout.eval_folder(model, cond, evaluation, *parts),
        }

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

    def generation(self, sampling: bool = True) -> dict:
        """The generation settings in force (`calibft.lm.generation_defaults.effective_settings`): exactly the
        requested ones, or (switch `generation_defaults: checkpoint`) what transformers 4.57.6 puts back from the
        checkpoint's generation config when the release asks for them."""
        checkpoint = self.checkpoint_generation_config()
        temperature, top_p = self.sampling.get("temperature", 1.0), self.sampling.get("top_p", 1.0)
        request = release_request(checkpoint, sampling, temperature, top_p)
        fallback = self.protocol["generation_defaults"] == "checkpoint"
        effective = effective_settings(checkpoint, request, fallback=fallback)
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
        return ChatOptions.from_config(self.chat)

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


EVALUATIONS = ("structured", "ssot")


def structured_prompt_ids(layout: Layout, split: str) -> list[str] | None:
    """The prompts of a split that the structured evaluations score: every one (None), or `max_prompts` of them
    and those that the qualitative figures draw."""
    structured, ablations = layout.config["evaluation"]["structured"], layout.config["ablations"]
    drawn = [panel["prompt"] for panel in structured["qualitative"]] + ablations["qualitative"]["prompts"]
    return evaluated_ids(split, structured.get("max_prompts"), drawn)


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
    # executing it, and the style that picks a prompt and answer rules (calibft.evals.ssot_release); these
    # replace `system` and `answer_pattern`
    release_prompts: str | None = None
    release_style: str = "default"

    def __post_init__(self):
        if self.evaluation not in EVALUATIONS:
            raise ValueError(f"evaluation must be one of {EVALUATIONS}, got {self.evaluation!r}")
        if self.answer_pattern is not None and re.compile(self.answer_pattern).groups < 1:
            raise ValueError(f"answer_pattern {self.answer_pattern!r} needs a group that captures the answer")
        if self.release_style not in ssot_release.STYLES:
            styles = ", ".join(ssot_release.STYLES)
            raise ValueError(f"release_style must be one of {styles}, got {self.release_style!r}")

    @staticmethod
    def split_fields(layout: Layout, model: str, cond: str, evaluation: str, split: str) -> dict[str, Any]:
        """The fields of both evaluations: the model under test, the split and the prompts sampled
        (`structured_prompt_ids`)."""
        section, structured = layout.config["evaluation"][evaluation], layout.config["evaluation"]["structured"]
        return {
            **ModelJob.under_test(layout, model, cond, section["sampling"], evaluation, split),
            "evaluation": evaluation,
            "split": split,
            "prompt_ids": structured_prompt_ids(layout, split),
            "bootstrap_replicates": structured["bootstrap_replicates"],
            "checkpoint_dir": layout.eval_checkpoints(model, cond, evaluation, split),
        }

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str, eval_split: str) -> StructuredJob:
        """Structured sampling, with the logit KL against the split's tries."""
        section = layout.config["evaluation"]["structured"]
        return cls(
            **cls.split_fields(layout, model, cond, "structured", eval_split),
            tries=layout.structured_tries(model, eval_split),
            logit_kl_paths=section["logit_kl_paths"],
            logit_kl_batch_size=section["logit_kl_batch_size"],
        )

    @classmethod
    def ssot_from_config(cls, layout: Layout, model: str, eval_split: str) -> StructuredJob:
        """The SSOT baseline of the base model: the release's prompts and answer rules (protocol switch
        `ssot_prompt: release`), or the config's instruction and answer pattern, the model's own where it has
        them (GPT-OSS)."""
        section, entry = layout.config["evaluation"]["ssot"], layout.config["models"][model]
        release_prompts = layout.ssot_release_prompts()
        if release_prompts is not None:
            prompt = {"release_prompts": release_prompts, "release_style": entry.get("ssot_release_style", "default")}
        else:
            prompt = {
                "system": entry.get("ssot_instruction", section["instruction"]),
                "answer_pattern": entry.get("ssot_answer_pattern", section["answer_pattern"]),
            }
        return cls(
            **cls.split_fields(layout, model, "base", "ssot", eval_split),
            chat_overrides=entry.get("ssot_chat", {}),
            **prompt,
        )


@dataclass(frozen=True, kw_only=True)
class ExactJob(ModelJob):
    """The exact distribution of one condition over the evaluation space of one split, and how the structured
    samples of the same run compare with it (`calibft.evals.exact_structured`).

    `sampling` is the structured evaluation's, so that the exact distribution is the one its samples come from
    (temperature and top-p in force, `ModelJob.settings`)."""

    split: str  # "unseen" or "ood"
    tries: str  # the split's tries of the evaluation space, for the model's tokenizer
    space: str  # the split's evaluation space: the values' strings and target probabilities
    samples: str  # samples.jsonl.gz of the structured evaluation of the same model, condition and split
    prompt_ids: list[str] | None = None  # the structured evaluation's; None: every prompt
    batch_nodes: int = 256  # trie nodes fed together (calibft.lm.trie_walk)
    spread_draws: int = 2000  # simulated sample sets per prompt behind the sampling spread (10 in each 0.5% tail)

    def __post_init__(self):
        if self.batch_nodes < 1:
            raise ValueError(f"batch_nodes must be >= 1, got {self.batch_nodes}")
        if self.spread_draws < 2:
            raise ValueError(f"spread_draws must be >= 2 (a spread needs several draws), got {self.spread_draws}")

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str, eval_split: str) -> ExactJob:
        evaluation = layout.config["evaluation"]
        space = evaluation["structured"]["space"]
        return cls(
            **cls.under_test(layout, model, cond, evaluation["structured"]["sampling"], "exact", eval_split),
            split=eval_split,
            tries=layout.structured_tries(model, eval_split),
            space=layout.space(space, eval_split),
            samples=layout.samples_file(model, cond, eval_split),
            prompt_ids=structured_prompt_ids(layout, eval_split),
            batch_nodes=evaluation["exact"]["batch_nodes"],
            spread_draws=evaluation["exact"]["spread_draws"],
            checkpoint_dir=layout.eval_checkpoints(model, cond, "exact", eval_split),
        )


OPEN_ENDED_THRESHOLDS: tuple[float, ...] = tuple(i / 100 for i in range(1, 100))  # 0.01, 0.02, ..., 0.99
OPEN_ENDED_HEADLINE_THRESHOLD = 0.9


@dataclass(frozen=True, kw_only=True)
class OpenEndedJob(ModelJob):
    """Random generation from the open-ended prompts, and the support of the first token."""

    prompts_file: str  # the authors' JSON array (`calibft.pipeline.assets.OPEN_ENDED_PROMPTS`)
    thresholds: list[float] = field(default_factory=lambda: list(OPEN_ENDED_THRESHOLDS))
    headline_threshold: float = OPEN_ENDED_HEADLINE_THRESHOLD

    def __post_init__(self):
        if self.headline_threshold not in self.thresholds:
            raise ValueError(f"headline_threshold {self.headline_threshold} must be one of the thresholds")

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str) -> OpenEndedJob:
        sampling = layout.config["evaluation"]["open_ended"]["sampling"]
        under_test = cls.under_test(layout, model, cond, sampling, "open_ended")
        return cls(**under_test, prompts_file=layout.open_ended_prompts())


# The paper's text (appendix app:mcq-prompt), ending, as in the authors' code, with a newline (Qwen3's template
# keeps it in the user turn).
MCQ_PROMPT = """\
You are a medical education expert who creates high-quality multiple-choice questions for medical students \
and professionals.

Please generate a medical multiple-choice question (single answer, 4 options). The question should cover \
medical knowledge and be of moderate difficulty.

Please strictly follow this format:
Question: [Question content]
A. [Option A content]
B. [Option B content]
C. [Option C content]
D. [Option D content]
Correct Answer: [A/B/C/D]
Explanation: [Brief explanation]

Requirements:
(1) The question should have practical medical value.
(2) All four options should be plausible with reasonable distractors.
(3) Only one correct answer.
(4) Output directly without any additional content.
(5) Cover different medical knowledge areas (e.g., internal medicine, surgery, pharmacology, pathology, \
diagnostics).
(6) The correct answer should be evenly distributed among A, B, C, D options to avoid bias toward any \
particular option.
"""


@dataclass(frozen=True, kw_only=True)
class MCQJob(ModelJob):
    """`samples_per_prompt` generations of the paper's MCQ prompt, sent as the only user message."""

    prompt: str = MCQ_PROMPT

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str) -> MCQJob:
        sampling = layout.config["evaluation"]["mcq"]["sampling"]
        return cls(**cls.under_test(layout, model, cond, sampling, "mcq"))


@dataclass(frozen=True, kw_only=True)
class GenerationJob(ModelJob):
    """NoveltyBench: `samples_per_prompt` answers to every prompt of one split (its first `max_prompts`)."""

    split: str  # "curated" or "wildchat"
    prompts_file: str
    max_prompts: int | None = None

    def __post_init__(self):
        if self.max_prompts is not None and self.max_prompts < 1:
            raise ValueError(f"max_prompts must be >= 1 or None, got {self.max_prompts}")

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str, nb_split: str) -> GenerationJob:
        section = layout.config["evaluation"]["noveltybench"]
        return cls(
            **cls.under_test(layout, model, cond, section["sampling"], "noveltybench", nb_split),
            split=nb_split,
            prompts_file=layout.noveltybench_prompts(nb_split),
            max_prompts=section.get("max_prompts"),
            checkpoint_dir=layout.eval_checkpoints(model, cond, "noveltybench", nb_split),
        )


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
    protocol: dict = field(default_factory=_protocol)  # every switch's value (calibft.core.protocol)

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str, nb_split: str) -> ScoringJob:
        out_dir = layout.eval_folder(model, cond, "noveltybench", nb_split)
        return cls(
            model_key=model,
            condition=cond,
            split=nb_split,
            generations=f"{out_dir}/generations.jsonl.gz",
            classifier=layout.evaluator("classifier"),
            classifier_tokenizer=layout.evaluator("classifier_tokenizer"),
            reward_model=layout.evaluator("reward_model"),
            precision=layout.config["evaluation"]["precision"],
            out_dir=out_dir,
            reward_batch_size=layout.config["evaluation"]["noveltybench"]["reward_batch_size"],
            checkpoint_dir=layout.eval_checkpoints(model, cond, "noveltybench_scores", nb_split),
            protocol=layout.protocol,
        )


TINYBENCH_BATCH_SIZE = 8
TINYBENCH_MAX_NEW_TOKENS = 256


@dataclass(frozen=True, kw_only=True)
class TinyBenchJob(ModelJob):
    """Every TinyBenchmarks task of one model and condition, so that the model is loaded once.

    GSM8K asks for greedy decoding, so `sampling` must stay empty; the decoding in force is
    `calibft.evals.tinybench.gsm8k_decoding` (under the switch `generation_defaults: checkpoint`, sampling where
    the checkpoint's generation config says so), seeded from `seed` when it samples.
    """

    tasks: dict[str, str]  # task (a key of TINYBENCH_TASKS) -> its dataset split as JSON lines, one row per line
    irt_params: str | None = None  # the tinyBenchmarks parameters: with them, summary.json holds each task's gp-IRT
    sampling: dict = field(default_factory=dict)
    batch_size: int = TINYBENCH_BATCH_SIZE
    max_new_tokens: int = TINYBENCH_MAX_NEW_TOKENS

    def __post_init__(self):
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

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str) -> TinyBenchJob:
        section = layout.config["evaluation"]["tinybenchmarks"]
        return cls(
            **cls.under_test(layout, model, cond, {}, "tinybench"),
            tasks=layout.tinybench_items(),
            irt_params=layout.irt_params(),
            batch_size=section["batch_size"],
            max_new_tokens=section["max_new_tokens"],
            checkpoint_dir=layout.eval_checkpoints(model, cond, "tinybench"),
        )


PALOMA_WINDOW = 2048
PALOMA_STRIDE = 1024
PALOMA_BATCH_SIZE = 8


def check_window(window: int, stride: int) -> None:
    """PALOMA's windows overlap by `window - stride` tokens of context: a window's first token has none."""
    if not 1 <= stride < window:
        raise ValueError(f"need 1 <= stride < window (a window's first token has no context), got {stride}/{window}")


@dataclass(frozen=True, kw_only=True)
class PalomaJob(ModelJob):
    """The perplexity of one model and condition on every PALOMA slice.

    PALOMA samples nothing and reads plain text, so `sampling` must stay empty and `chat` and `seed` only
    identify the run.
    """

    slices: dict[str, str]  # slice name -> its JSON-lines file, in the order of the tables
    sampling: dict = field(default_factory=dict)
    window: int = PALOMA_WINDOW
    stride: int = PALOMA_STRIDE
    batch_size: int = PALOMA_BATCH_SIZE
    max_documents: int | None = None  # per slice, the file's first ones; None: all

    def __post_init__(self):
        if self.sampling:
            raise ValueError(
                f"PALOMA scores given text and samples nothing; sampling must be empty, got {self.sampling}"
            )
        if not self.slices:
            raise ValueError("slices must name at least one slice file")
        check_window(self.window, self.stride)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_documents is not None and self.max_documents < 0:
            raise ValueError(f"max_documents must be >= 0 or None, got {self.max_documents}")

    @classmethod
    def from_config(cls, layout: Layout, model: str, cond: str) -> PalomaJob:
        section = layout.config["evaluation"]["paloma"]
        return cls(
            **cls.under_test(layout, model, cond, {}, "paloma"),
            slices=layout.paloma_slices(),
            window=section["window"],
            stride=section["stride"],
            batch_size=section["batch_size"],
            max_documents=section["max_documents"],
            checkpoint_dir=layout.eval_checkpoints(model, cond, "paloma"),
        )
