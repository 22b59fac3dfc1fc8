"""What `python -m calibft.evals.mcq JOB` runs: one `MCQJob`, its generations of the prompt, then
generations.jsonl.gz, metrics.json (`calibft.evals.mcq.metrics.score`) and provenance.json."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from calibft.core.io import read_job, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.mcq.job import MCQJob
from calibft.evals.mcq.metrics import sample_records, score
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import sample_texts


def run(job: MCQJob) -> None:
    started = time.time()
    tokenizer, model = job.load()
    settings = job.settings()
    ids = chat_prompt_ids(tokenizer, job.prompt, job.chat_options(), bos=job.protocol["prompt_bos"])
    reasoning, seed = job.protocol["answer_reasoning"], job.seed_of("mcq", job.prompt)
    texts, finished = sample_texts(model, tokenizer, ids, settings, seed, progress=True, reasoning=reasoning)
    records = sample_records(texts, finished, reasoning)
    out = Path(job.out_dir)
    write_jsonl(out / "generations.jsonl.gz", records)
    header = job.header("mcq", wall_time_s=time.time() - started)
    bootstrap = {"replicates": REPLICATES, "bootstrap_seed": job.seed_of("bootstrap", "mcq")}
    write_json(out / "metrics.json", score(records, **bootstrap, reasoning=reasoning, **header))
    job.write_provenance(model, tokenizer, job.generation())


def main(argv: list[str] | None = None) -> None:
    run(read_job(MCQJob, "calibft.evals.mcq", sys.argv[1:] if argv is None else argv))
