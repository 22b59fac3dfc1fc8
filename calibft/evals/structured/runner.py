"""What `python -m calibft.evals.structured JOB` runs: one `StructuredJob`, its prompts' logit KL (structured
only) and samples, then metrics.json (`calibft.evals.structured.metrics.score`) and provenance.json."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, write_json, write_jsonl
from calibft.data.grid import prompts, select
from calibft.data.trie import TrieSet
from calibft.evals.structured import ssot
from calibft.evals.structured.job import StructuredJob
from calibft.evals.structured.metrics import answer_part, sample_records, score
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import sample_texts
from calibft.lm.models import padding_id
from calibft.training.objectives import path_kl


def system_message(job: StructuredJob) -> str | None:
    """The system (or developer) message: the release's SSOT prompt, or the job's `system`."""
    if job.release_prompts is None:
        return job.system
    prompts = ssot.read_prompts(job.release_prompts)
    return ssot.system_message(prompts, ssot.STYLES[job.release_style].prompt)


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

    settings, answer, reasoning = job.settings(), answer_part(job), job.protocol["answer_reasoning"]
    checkpoint = checkpoint_folder(job)
    records = []
    for prompt, ids in zip(
        tqdm(chosen, desc=f"{job.evaluation} {job.model_key}/{job.condition}/{job.split}"), prompt_ids, strict=True
    ):

        def draw(prompt=prompt, ids=ids):
            seed = job.seed_of(job.evaluation, prompt.id)
            texts, finished = sample_texts(model, tokenizer, ids, settings, seed, reasoning=reasoning)
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
