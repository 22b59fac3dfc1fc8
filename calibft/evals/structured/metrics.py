"""Structured-sampling evaluation and the SSOT baseline (docs/metrics.md, Structured sampling and SSOT baseline).

    python -m calibft.evals.structured JOB     # JOB: a StructuredJob as JSON text or file

For one model, condition (base or a recipe's adapter) and split, every prompt (or the job's `prompt_ids`, a
smoke run's few) gets:

- its logit KL (structured only): the trie KL of `logit_kl_paths` fixed paths from the evaluation target,
  teacher forced (`calibft.training.objectives.path_kl`);
- `samples_per_prompt` answers from the sampling engine, each parsed and checked for validity; the SSOT
  baseline prompts with its instruction as the system message and takes the answer from `answer_pattern`.

Outputs in `out_dir`: `samples.jsonl.gz` (one object per sample: id, index, text, value, valid, finished),
`logit_kl.jsonl` (structured only) and `metrics.json` (per prompt, per family, aggregate), which `score`
computes from the samples alone, so that anyone can recompute it. With a `checkpoint_dir`, each prompt's
samples are kept there as soon as they are drawn, and a job restarted after a preemption samples only the
prompts that are left (each prompt's seed is its own, so the result is the uninterrupted one).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, write_json, write_jsonl
from calibft.data.families import family
from calibft.data.grid import Prompt, prompts, select
from calibft.data.trie import TrieSet
from calibft.evals import ssot_release
from calibft.evals.bootstrap import LEVEL, PromptSamples, structured_intervals
from calibft.evals.metrics import (
    family_rows,
    finite_or_none,
    parse_number,
    structured_aggregate,
    undefined_families,
    valid_mask,
    w1_scale,
    wasserstein1,
)
from calibft.evals.structured_job import StructuredJob
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import sample_texts
from calibft.lm.models import padding_id
from calibft.training.objectives import path_kl


def system_message(job: StructuredJob) -> str | None:
    """The system (or developer) message: the release's SSOT prompt, or the job's `system`."""
    if job.release_prompts is None:
        return job.system
    prompts = ssot_release.read_prompts(job.release_prompts)
    return ssot_release.system_message(prompts, ssot_release.STYLES[job.release_style].prompt)


def answer_part(job: StructuredJob) -> Callable[[str], str | None]:
    """What takes the answer part of an output: the release's rule, or the job's `answer_pattern`."""
    if job.release_prompts is None:
        return lambda text: extract_answer(text, job.answer_pattern)
    gpt_oss = ssot_release.STYLES[job.release_style].gpt_oss_output
    return lambda text: ssot_release.extract_answer(text, gpt_oss=gpt_oss)


def extract_answer(text: str, pattern: str | None) -> str | None:
    """The answer part of an output: all of it, or the first group of the first match of `pattern`."""
    if pattern is None:
        return text
    match = re.search(pattern, text, re.DOTALL)
    return match.group(1) if match else None


def sample_records(
    prompt: Prompt, texts: Sequence[str], finished: np.ndarray, pattern: str | Callable[[str], str | None] | None
) -> list[dict]:
    """One record per answer: its text, the number it parses to (None if none) and whether that is valid.

    `pattern` takes the answer part of a text: a regex for `extract_answer`, None for all of it, or a function.
    """
    answer = pattern if callable(pattern) else lambda text: extract_answer(text, pattern)
    answers = [answer(text) for text in texts]
    values = [None if answer is None else parse_number(answer) for answer in answers]
    valid = valid_mask(np.array([np.nan if v is None else v for v in values]), prompt.family, prompt.params)
    return [
        {"id": prompt.id, "index": i, "text": text, "value": value, "valid": bool(ok), "finished": bool(done)}
        for i, (text, value, ok, done) in enumerate(zip(texts, values, valid, finished, strict=True))
    ]


def prompt_metrics(prompt: Prompt, records: Sequence[dict], logit_kl: float | None = None) -> dict:
    """The figures of one prompt from its sample records."""
    law = family(prompt.family).law(prompt.params)
    values = np.array([r["value"] for r in records if r["valid"]], dtype=np.float64)
    w1, scale = wasserstein1(values, law), w1_scale(law)
    return {
        "id": prompt.id,
        "family": prompt.family,
        "params": dict(prompt.params),
        "samples": len(records),
        "valid": len(values),
        "valid_rate": len(values) / len(records) if records else None,
        "w1": finite_or_none(w1),
        "w1_scale": scale,
        "w1_norm": finite_or_none(w1 / scale) if scale > 0 else None,  # a law with 90% of its mass on one value
        "logit_kl": logit_kl,
    }


def score(
    chosen: Sequence[Prompt],
    records: Sequence[dict],
    logit_kl: Mapping[str, float] | None = None,
    logit_kl_across_families: str = "mean",
    replicates: int = 0,
    bootstrap_seed: int = 0,
    w1_nonfinite_prompts: str = "undefined",
    **header,
) -> dict:
    """metrics.json: per prompt, per family (mean of finite prompt values) and aggregate: W1 the median across
    families (None when a family has no finite value, or under `w1_nonfinite_prompts: undefined` a prompt whose W1
    is not finite), logit KL the mean or median of the family means (`logit_kl_across_families`), valid rate the
    mean across families (both switches of `calibft.core.protocol`); with `replicates`, each aggregate's bootstrap
    interval (`calibft.evals.bootstrap`, seeded by `bootstrap_seed`)."""
    by_prompt: dict[str, list[dict]] = {p.id: [] for p in chosen}
    for record in records:
        by_prompt[record["id"]].append(record)
    rows = [prompt_metrics(p, by_prompt[p.id], None if logit_kl is None else logit_kl[p.id]) for p in chosen]
    aggregate = structured_aggregate(rows, logit_kl_across_families, w1_nonfinite_prompts)
    means = aggregate.pop("family_means")
    families = family_rows(means, [row["family"] for row in rows])
    metrics = {
        **header,
        "aggregate": {
            **aggregate,
            "num_families": len(families),
            "undefined_families": undefined_families(means["w1_norm"]),
        },
        "families": families,
        "prompts": rows,
    }
    if replicates:
        kl = logit_kl or {}
        samples = [PromptSamples.of_records(p, by_prompt[p.id], kl.get(p.id)) for p in chosen]
        across = logit_kl_across_families
        metrics["intervals"] = structured_intervals(
            samples, bootstrap_seed, replicates, LEVEL, across, w1_nonfinite_prompts=w1_nonfinite_prompts
        )
    return metrics


def run(job: StructuredJob) -> None:
    started = time.time()
    tokenizer, model = job.load()
    options = job.chat_options().merged(job.chat_overrides, "chat_overrides")
    tries = TrieSet.load(job.tries) if job.tries else None
    if tries is not None and job.prompt_ids is not None:
        tries = tries.subset(job.prompt_ids)
    chosen = select(prompts(job.split), job.prompt_ids if tries is None else list(tries.ids))
    system = system_message(job)
    prompt_ids = [chat_prompt_ids(tokenizer, p.prompt, options, system, job.protocol["prompt_bos"]) for p in chosen]
    out = Path(job.out_dir)

    logit_kl = None
    if tries is not None:
        kl = path_kl(
            model,
            tries,
            prompt_ids,
            padding_id(tokenizer),
            job.logit_kl_paths,
            job.seed,
            job.logit_kl_batch_size,
            seeds=job.protocol["logit_kl_path_seeds"],
            numerics=job.protocol["numerics"],
        )
        logit_kl = {p.id: float(row.mean()) for p, row in zip(chosen, kl, strict=True)}
        write_jsonl(
            out / "logit_kl.jsonl",
            (
                {"id": p.id, "family": p.family, "path_kl": row.tolist(), "logit_kl": float(row.mean())}
                for p, row in zip(chosen, kl, strict=True)
            ),
        )

    settings, answer = job.settings(), answer_part(job)
    checkpoint = checkpoint_folder(job)
    records = []
    for prompt, ids in zip(
        tqdm(chosen, desc=f"{job.evaluation} {job.model_key}/{job.condition}/{job.split}"), prompt_ids, strict=True
    ):

        def draw(prompt=prompt, ids=ids):
            texts, finished = sample_texts(model, tokenizer, ids, settings, job.seed_of(job.evaluation, prompt.id))
            return sample_records(prompt, texts, finished, answer)

        records.extend(per_prompt(checkpoint, prompt.id, draw))
    write_jsonl(out / "samples.jsonl.gz", records)
    header = job.header(
        job.evaluation, split=job.split, samples_per_prompt=settings.num_samples, wall_time_s=time.time() - started
    )
    across = job.protocol["logit_kl_across_families"]
    bootstrap = {"replicates": job.bootstrap_replicates, "bootstrap_seed": job.seed_of("bootstrap", job.split)}
    nonfinite = job.protocol["w1_nonfinite_prompts"]
    metrics = score(chosen, records, logit_kl, across, **bootstrap, w1_nonfinite_prompts=nonfinite, **header)
    write_json(out / "metrics.json", metrics)
    job.write_provenance(model, tokenizer, job.generation(), tries=job.tries, ssot_prompts=job.release_prompts)
    finish_checkpoints(checkpoint)


def main(argv: list[str] | None = None) -> None:
    run(read_job(StructuredJob, "calibft.evals.structured", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
