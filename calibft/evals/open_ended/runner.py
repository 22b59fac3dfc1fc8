"""What `python -m calibft.evals.open_ended JOB` runs: one `OpenEndedJob`, each prompt's first-token support
and sampled answers, then samples.jsonl.gz, support.jsonl, metrics.json (`calibft.evals.open_ended.metrics.score`)
and provenance.json."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from calibft.core.io import read_job, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.open_ended.job import OpenEndedJob
from calibft.evals.open_ended.metrics import NORMALIZATIONS, NUMERICS, first_token_support, sample_records, score
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import SamplingSettings, inference, input_device, sample_texts


def load_prompts(path: str | Path) -> list[str]:
    """The prompts of the authors' file: a JSON array of non-empty strings."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err}); expected an array of prompt strings") from err
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty JSON array of prompt strings, got {type(data).__name__}")
    for i, prompt in enumerate(data):
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{path}: prompt {i} must be a non-empty string, got {prompt!r}")
    return data


def first_token_probs(model, prompt_ids: Sequence[int], numerics: str = "fp32") -> np.ndarray | torch.Tensor:
    """The next-token distribution at the first generated position.

    One forward pass of the prompt in eval mode (no dropout), keeping only the last position's logits. `numerics`
    (the `numerics` switch of `calibft.core.protocol`): `fp32` gives the float64 softmax of the float32 logits as a
    numpy array; `logits_dtype` the softmax in the logits' dtype (bf16 on GPUs), as the authors' release takes it
    (there divided by the sampling temperature, 1), as a tensor on the model's device for `first_token_support`.
    """
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    with inference(model):
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=input_device(model))
        logits = model(input_ids=ids, logits_to_keep=1).logits[0, -1]
        if numerics == "logits_dtype":
            return torch.softmax(logits, dim=-1)
        return torch.softmax(logits.float().double(), dim=-1).cpu().numpy()


def sample_answers(
    model, tokenizer, prompt_ids: Sequence[int], settings: SamplingSettings, seed: int, rule: str
) -> tuple[list[str], np.ndarray]:
    """Sampled answers as `normalize` reads them under `rule`, and `finished`.

    `calibft.lm.generation.sample_texts`, decoded as `calibft.lm.chat.decode_output` decodes under the value of the
    same name: `release` the decoded text (special tokens skipped, surrounding whitespace stripped, reasoning kept),
    as the release's HF backend hands it to its normalization; `strip_reasoning` with reasoning stripped as well.
    Both draw the same tokens.
    """
    if rule not in NORMALIZATIONS:
        raise ValueError(f"rule must be one of {NORMALIZATIONS}, got {rule!r}")
    return sample_texts(model, tokenizer, prompt_ids, settings, seed, reasoning=rule)


def run(job: OpenEndedJob) -> None:
    started = time.time()
    prompts = load_prompts(job.prompts_file)
    tokenizer, model = job.load()
    options, settings = job.chat_options(), job.settings()
    rule = job.protocol["open_ended_normalization"]

    records, supports = [], []
    for i, prompt in enumerate(tqdm(prompts, desc=f"open_ended {job.model_key}/{job.condition}")):
        ids = chat_prompt_ids(tokenizer, prompt, options, bos=job.protocol["prompt_bos"])
        numerics = job.protocol["numerics"]
        support = first_token_support(first_token_probs(model, ids, numerics), job.thresholds, numerics)
        supports.append({"prompt_index": i, "prompt": prompt, "support": support.tolist()})
        texts, finished = sample_answers(model, tokenizer, ids, settings, job.seed_of("open_ended", prompt), rule)
        records.extend(sample_records(i, prompt, texts, finished, rule))
    out = Path(job.out_dir)
    write_jsonl(out / "samples.jsonl.gz", records)
    write_jsonl(out / "support.jsonl", supports)
    header = job.header("open_ended", samples_per_prompt=settings.num_samples, wall_time_s=time.time() - started)
    bootstrap = {"replicates": REPLICATES, "bootstrap_seed": job.seed_of("bootstrap", "open_ended")}
    metrics = score(
        prompts, records, supports, job.thresholds, job.headline_threshold, normalization=rule, **bootstrap, **header
    )
    write_json(out / "metrics.json", metrics)
    job.write_provenance(model, tokenizer, job.generation(), prompts=job.prompts_file)


def main(argv: list[str] | None = None) -> None:
    run(read_job(OpenEndedJob, "calibft.evals.open_ended", sys.argv[1:] if argv is None else argv))
