"""NoveltyBench jobs (docs/metrics.md, NoveltyBench): generations of the model under test, then their scores.

    python -m calibft.evals.noveltybench_run generate JOB   # JOB: a GenerationJob as JSON text or file
    python -m calibft.evals.noveltybench_run score JOB      # JOB: a ScoringJob

Two jobs, because they need different models on the GPU: `generate` samples 10 answers to every prompt of
one split (each prompt the only user message, no system prompt) from the model under test, at the settings that
the `noveltybench_sampling` switch puts in force (`GenerationJob.checkpoint_defaults`); `score` loads the
benchmark's evaluators, the DeBERTa similarity classifier and the reward model, and scores each prompt's
answers with `calibft.evals.noveltybench.score_prompt`.

Prompts files are JSON lines in the benchmark's format: `{"id": "curated-31", "category": "...", "prompt":
"..."}` (category optional). Outputs: `generations.jsonl.gz` (per prompt: id, split, category, prompt,
generations, finished), then `partitions.jsonl` (per prompt: id and class_ids, the similarity classifier's
equivalence classes of its generations), `scores.jsonl` (the generations' fields plus class_ids, rewards,
ratings, utility and distinct) and `summary.json` (the split's means and their bootstrap intervals over
resamples of the prompts, `intervals`; all recomputable from `scores.jsonl`). Both jobs keep per-prompt
checkpoints when given a `checkpoint_dir`, so a preempted job resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.core.provenance import write_provenance
from calibft.evals.bootstrap import REPLICATES, interval_block
from calibft.evals.noveltybench import (
    bootstrap_seed,
    prompt_draws,
    reward_scores,
    score_prompt,
    similarity_classifier,
    summarize_prompts,
)
from calibft.evals.noveltybench_job import GenerationJob, ScoringJob
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import sample_texts
from calibft.lm.models import load_classifier, load_tokenizer


def load_prompts(path: str | Path, split: str) -> list[dict]:
    """The prompts of one split: {id, split, category, prompt} per line of a NoveltyBench JSON-lines file.

    A line without an id gets `{split}-{line number}`; ids must be unique and prompts non-empty strings.
    """
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {i + 1}: not JSON ({err})") from err
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{path}, line {i + 1}: expected an object with a non-empty string `prompt`")
        rows.append(
            {
                "id": str(row.get("id", f"{split}-{i}")),
                "split": split,
                "category": row.get("category"),
                "prompt": prompt,
            }
        )
    if not rows:
        raise ValueError(f"{path}: no prompts")
    ids = [row["id"] for row in rows]
    duplicates = sorted({x for x in ids if ids.count(x) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate prompt ids {duplicates[:5]}")
    return rows


def generate(job: GenerationJob) -> None:
    prompts = load_prompts(job.prompts_file, job.split)[: job.max_prompts]
    tokenizer, model = job.load()
    options, settings = job.chat_options(), job.settings()
    checkpoint = checkpoint_folder(job)
    records = []
    for row in tqdm(prompts, desc=f"noveltybench {job.model_key}/{job.condition}/{job.split}"):

        def draw(row=row):
            ids = chat_prompt_ids(tokenizer, row["prompt"], options, bos=job.protocol["prompt_bos"])
            texts, finished = sample_texts(model, tokenizer, ids, settings, job.seed_of("noveltybench", row["id"]))
            return [{**row, "generations": texts, "finished": finished.tolist()}]

        records.extend(per_prompt(checkpoint, row["id"], draw))
    write_jsonl(Path(job.out_dir) / "generations.jsonl.gz", records)
    job.write_provenance(model, tokenizer, job.generation(), prompts=job.prompts_file)
    finish_checkpoints(checkpoint)


def split_summary(rows: list[dict], split: str, replicates: int = REPLICATES) -> dict:
    """summary.json's figures of one split's rows: the mean utility and distinct count over its prompts and
    (with `replicates`) their bootstrap intervals over resamples of the prompts, seeded by the split."""
    summary = summarize_prompts(rows)["pooled"]
    if replicates:
        seed = bootstrap_seed(split)
        draws = prompt_draws(rows, seed, replicates)
        summary["intervals"] = interval_block(draws, seed, "prompts", units={split: len(rows)})
    return summary


def score(job: ScoringJob) -> None:
    started = time.time()
    generations = read_jsonl(job.generations)
    # The similarity classifier runs in fp32 whatever the precision, as upstream's partition.py loads it: its
    # fixed 0.102 threshold on P(equivalent) is sensitive to bf16 rounding. The reward model follows `precision`.
    classify = similarity_classifier(load_classifier(job.classifier, "fp32"), load_tokenizer(job.classifier_tokenizer))
    reward_model, reward_tokenizer = load_classifier(job.reward_model, job.precision), load_tokenizer(job.reward_model)
    checkpoint = checkpoint_folder(job)
    rows = []
    for record in tqdm(generations, desc=f"noveltybench scores {job.model_key}/{job.condition}/{job.split}"):

        def scored(record=record):
            texts = record["generations"]
            chats = [
                [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": t}] for t in texts
            ]
            bos = job.protocol["noveltybench_reward_bos"]
            rewards = reward_scores(reward_model, reward_tokenizer, chats, job.reward_batch_size, bos)
            return [{**record, "rewards": rewards.tolist(), **score_prompt(texts, rewards, classify)}]

        rows.extend(per_prompt(checkpoint, record["id"], scored))
    out = Path(job.out_dir)
    write_jsonl(out / "partitions.jsonl", [{"id": row["id"], "class_ids": row["class_ids"]} for row in rows])
    write_jsonl(out / "scores.jsonl", rows)
    header = {
        "evaluation": "noveltybench",
        "model": job.model_key,
        "condition": job.condition,
        "split": job.split,
        "wall_time_s": time.time() - started,
        "job": asdict(job),
    }
    write_json(out / "summary.json", {**header, **split_summary(rows, job.split)})
    inputs = {"generations": job.generations, "classifier": job.classifier, "reward_model": job.reward_model}
    write_provenance(out, job, inputs=inputs, loaded={"reward_model": reward_model})
    finish_checkpoints(checkpoint)


COMMANDS = {"generate": (GenerationJob, generate), "score": (ScoringJob, score)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: python -m calibft.evals.noveltybench_run {{{'|'.join(COMMANDS)}}} JOB")
    job_type, command = COMMANDS[argv[0]]
    command(read_job(job_type, f"calibft.evals.noveltybench_run {argv[0]}", argv[1:]))


if __name__ == "__main__":
    main()
