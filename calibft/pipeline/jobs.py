"""The workflow's jobs built from the config and a rule's wildcards: one function per kind of job, each returning
the frozen dataclass that its runner reads back as JSON (`calibft.core.io.read_job`).

    job = structured_job(Layout(config, basedir), model="qwen3_8b", cond="soft", eval_split="unseen")
    json.dumps(dataclasses.asdict(job))  # what `python -m calibft.evals.structured JOB` reads

Each job lives with what runs it; only building it from the config (the `Layout`) is here:

| builder | job (with its module) | runner |
|---|---|---|
| `train_job` | `TrainJob` (`calibft.training.job`) | `calibft.training.train` |
| `structured_job`, `ssot_job` | `StructuredJob` (`calibft.evals.structured.job`) | `calibft.evals.structured` |
| `exact_job` | `ExactJob` (`calibft.evals.exact.job`) | `calibft.evals.exact` |
| `open_ended_job` | `OpenEndedJob` (`calibft.evals.open_ended.job`) | `calibft.evals.open_ended` |
| `mcq_job` | `MCQJob` (`calibft.evals.mcq.job`) | `calibft.evals.mcq` |
| `generation_job` | `GenerationJob` (`calibft.evals.noveltybench.job`) | `calibft.evals.noveltybench generate` |
| `scoring_job` | `ScoringJob` (`calibft.evals.noveltybench.job`) | `calibft.evals.noveltybench score` |
| `tinybench_job` | `TinyBenchJob` (`calibft.evals.tinybench.job`) | `calibft.evals.tinybench` |
| `paloma_job` | `PalomaJob` (`calibft.evals.paloma.job`) | `calibft.evals.paloma` |

Every evaluation's job extends `calibft.evals.job.ModelJob`, whose fields `under_test` fills.

The workflow imports this module to plan, so it does not import torch (nor do the jobs' modules).
"""

from __future__ import annotations

from typing import Any

from calibft.data.grid import evaluated_ids
from calibft.evals.exact.job import ExactJob
from calibft.evals.mcq.job import MCQJob
from calibft.evals.noveltybench.job import GenerationJob, ScoringJob
from calibft.evals.open_ended.job import OpenEndedJob
from calibft.evals.paloma.job import PalomaJob
from calibft.evals.structured.job import StructuredJob
from calibft.evals.tinybench.job import TinyBenchJob
from calibft.pipeline.layout import Layout
from calibft.training.job import Recipe, TrainingSettings, TrainJob, training_processes


def train_job(layout: Layout, model: str, recipe: str) -> TrainJob:
    config, entry = layout.config, layout.config["models"][model]
    return TrainJob(
        model=layout.model_source(model),
        tokenizer=layout.tokenizer_source(entry["tokenizer"]),
        chat=entry["chat"],
        recipe=Recipe(**config["recipes"][recipe]),
        training=TrainingSettings(**config["training"]),
        seed=layout.run_seed,
        train_data=layout.train_data(model, recipe),
        probe_tries=layout.probe_tries(model),
        out_dir=layout.adapter_folder(model, recipe),
        checkpoint_dir=layout.train_checkpoints(model, recipe),
        protocol=layout.protocol,
        world_size=training_processes(entry),
    )


def under_test(layout: Layout, model: str, cond: str, sampling: dict, evaluation: str, *parts: str) -> dict[str, Any]:
    """The `ModelJob` fields of `model` in condition `cond` (the base model or a recipe's adapter), writing into the
    folder of `evaluation` and its `parts` (`Layout.eval_folder`)."""
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


def structured_prompt_ids(layout: Layout, split: str) -> list[str] | None:
    """The prompts of a split that the structured evaluations score: every one (None), or `max_prompts` of them
    and those that the qualitative figures draw."""
    structured, ablations = layout.config["evaluation"]["structured"], layout.config["ablations"]
    drawn = [panel["prompt"] for panel in structured["qualitative"]] + ablations["qualitative"]["prompts"]
    return evaluated_ids(split, structured.get("max_prompts"), drawn)


def split_fields(layout: Layout, model: str, cond: str, evaluation: str, split: str) -> dict[str, Any]:
    """The fields of both structured evaluations (structured sampling and SSOT): the model under test, the split
    and the prompts sampled (`structured_prompt_ids`)."""
    section, structured = layout.config["evaluation"][evaluation], layout.config["evaluation"]["structured"]
    return {
        **under_test(layout, model, cond, section["sampling"], evaluation, split),
        "evaluation": evaluation,
        "split": split,
        "prompt_ids": structured_prompt_ids(layout, split),
        "bootstrap_replicates": structured["bootstrap_replicates"],
        "checkpoint_dir": layout.eval_checkpoints(model, cond, evaluation, split),
    }


def structured_job(layout: Layout, model: str, cond: str, eval_split: str) -> StructuredJob:
    """Structured sampling, with the logit KL against the split's tries."""
    section = layout.config["evaluation"]["structured"]
    return StructuredJob(
        **split_fields(layout, model, cond, "structured", eval_split),
        tries=layout.structured_tries(model, eval_split),
        logit_kl_paths=section["logit_kl_paths"],
        logit_kl_batch_size=section["logit_kl_batch_size"],
    )


def ssot_job(layout: Layout, model: str, eval_split: str) -> StructuredJob:
    """The SSOT baseline of the base model: the release's prompts and answer rules (protocol switch
    `ssot_prompt: release`), or the config's instruction and answer pattern, the model's own where it has them
    (GPT-OSS)."""
    section, entry = layout.config["evaluation"]["ssot"], layout.config["models"][model]
    release_prompts = layout.ssot_release_prompts()
    if release_prompts is not None:
        prompt = {"release_prompts": release_prompts, "release_style": entry.get("ssot_release_style", "default")}
    else:
        prompt = {
            "system": entry.get("ssot_instruction", section["instruction"]),
            "answer_pattern": entry.get("ssot_answer_pattern", section["answer_pattern"]),
        }
    return StructuredJob(
        **split_fields(layout, model, "base", "ssot", eval_split),
        chat_overrides=entry.get("ssot_chat", {}),
        release_strips_thinking=entry.get("release_strips_thinking", False),
        **prompt,
    )


def exact_job(layout: Layout, model: str, cond: str, eval_split: str) -> ExactJob:
    evaluation = layout.config["evaluation"]
    space = evaluation["structured"]["space"]
    return ExactJob(
        **under_test(layout, model, cond, evaluation["structured"]["sampling"], "exact", eval_split),
        split=eval_split,
        tries=layout.structured_tries(model, eval_split),
        space=layout.space(space, eval_split),
        samples=layout.samples_file(model, cond, eval_split),
        prompt_ids=structured_prompt_ids(layout, eval_split),
        batch_nodes=evaluation["exact"]["batch_nodes"],
        spread_draws=evaluation["exact"]["spread_draws"],
        w1_norm_tolerance=evaluation["exact"]["tolerance"]["w1_norm"],
        mass_tolerance=evaluation["exact"]["tolerance"]["mass"],
        checkpoint_dir=layout.eval_checkpoints(model, cond, "exact", eval_split),
    )


def open_ended_job(layout: Layout, model: str, cond: str) -> OpenEndedJob:
    sampling = layout.config["evaluation"]["open_ended"]["sampling"]
    return OpenEndedJob(
        **under_test(layout, model, cond, sampling, "open_ended"), prompts_file=layout.open_ended_prompts()
    )


def mcq_job(layout: Layout, model: str, cond: str) -> MCQJob:
    sampling = layout.config["evaluation"]["mcq"]["sampling"]
    return MCQJob(**under_test(layout, model, cond, sampling, "mcq"))


def generation_job(layout: Layout, model: str, cond: str, nb_split: str) -> GenerationJob:
    section = layout.config["evaluation"]["noveltybench"]
    return GenerationJob(
        **under_test(layout, model, cond, section["sampling"], "noveltybench", nb_split),
        split=nb_split,
        prompts_file=layout.noveltybench_prompts(nb_split),
        max_prompts=section.get("max_prompts"),
        checkpoint_dir=layout.eval_checkpoints(model, cond, "noveltybench", nb_split),
        release_strips_thinking=layout.config["models"][model].get("release_strips_thinking", False),
    )


def scoring_job(layout: Layout, model: str, cond: str, nb_split: str) -> ScoringJob:
    out_dir = layout.eval_folder(model, cond, "noveltybench", nb_split)
    return ScoringJob(
        model_key=model,
        condition=cond,
        split=nb_split,
        generations=layout.eval_file(model, cond, "noveltybench", nb_split, "generations.jsonl.gz"),
        classifier=layout.evaluator("classifier"),
        classifier_tokenizer=layout.evaluator("classifier_tokenizer"),
        reward_model=layout.evaluator("reward_model"),
        precision=layout.config["evaluation"]["precision"],
        out_dir=out_dir,
        reward_batch_size=layout.config["evaluation"]["noveltybench"]["reward_batch_size"],
        checkpoint_dir=layout.eval_checkpoints(model, cond, "noveltybench_scores", nb_split),
        protocol=layout.protocol,
    )


def tinybench_job(layout: Layout, model: str, cond: str) -> TinyBenchJob:
    section, entry = layout.config["evaluation"]["tinybenchmarks"], layout.config["models"][model]
    return TinyBenchJob(
        **under_test(layout, model, cond, {}, "tinybench"),
        tasks=layout.tinybench_items(),
        irt_params=layout.irt_params(),
        batch_size=section["batch_size"],
        max_new_tokens=section["max_new_tokens"],
        checkpoint_dir=layout.eval_checkpoints(model, cond, "tinybench"),
        release_strips_thinking=entry.get("release_strips_thinking", False),
    )


def paloma_job(layout: Layout, model: str, cond: str) -> PalomaJob:
    section = layout.config["evaluation"]["paloma"]
    return PalomaJob(
        **under_test(layout, model, cond, {}, "paloma"),
        slices=layout.paloma_slices(),
        window=section["window"],
        stride=section["stride"],
        batch_size=section["batch_size"],
        max_documents=section["max_documents"],
        checkpoint_dir=layout.eval_checkpoints(model, cond, "paloma"),
    )
