"""Open-ended random generation (docs/metrics.md, Open-ended random generation).

    python -m calibft.evals.open_ended JOB     # JOB: an OpenEndedJob as JSON text or file

Requests such as "Name a random city. Output ONLY the answer." have no target distribution; the evaluation
measures how broad the model's answers are, two ways per prompt:

- top-t support: the smallest number of first tokens (softmax of the logits at the first generated
  position) whose probabilities cover t, at every threshold t in 0.01..0.99 (0.9 is the headline);
- unique fraction: `samples_per_prompt` sampled answers, each normalized (`normalize`, by the protocol's
  `open_ended_normalization` switch); the number of distinct non-empty answers divided by the number of samples.

Outputs in `out_dir`: `samples.jsonl.gz` (one object per sample: prompt_index, prompt, index, text,
normalized, finished; `text` is the answer as the normalization reads it, `sample_answers`), `support.jsonl`
(one object per prompt: its support at every threshold, in the order of `metrics.json`'s `thresholds`) and
`metrics.json`, which `score` computes from those two files alone, with the bootstrap interval of each
aggregate over resamples of the samples within each prompt (`intervals`, `resampled_distinct`).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from calibft.core.io import read_job, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES, interval_block, resample_indices
from calibft.evals.open_ended_job import OPEN_ENDED_HEADLINE_THRESHOLD, OPEN_ENDED_THRESHOLDS, OpenEndedJob
from calibft.lm.chat import chat_prompt_ids, strip_reasoning
from calibft.lm.generation import SamplingSettings, inference, input_device, sample, sample_texts, stop_token_ids

# Coverage within this of a threshold reaches it: sums of decimal probabilities (0.5 + 0.3) round either way.
COVERAGE_TOLERANCE = 1e-9
# The surrounding quotes `normalize` removes one pair of, as the authors' normalization does: straight quotes
# only, so that “Paris” and "Paris" stay two answers there and here.
QUOTES = ("'", '"')
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol
NORMALIZATIONS = ("release", "strip_reasoning")  # the `open_ended_normalization` switch of calibft.core.protocol
# The release's patterns (inference/chat_format.py, open_random_gen/metrics.py): case-insensitive think tags.
_RELEASE_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_RELEASE_UNCLOSED_THINK = re.compile(r"<think>.*$", re.DOTALL | re.IGNORECASE)
_RELEASE_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


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


def normalize(text: str, rule: str = "release") -> str:
    """The answer an output counts as: its first non-empty line once reasoning is removed, whitespace collapsed,
    one pair of matching surrounding quotes removed (with the whitespace they enclosed). Case is kept.

    `rule` (the `open_ended_normalization` switch): `release` removes reasoning as the release's
    `normalize_open_random_output` does (`release_lines`, and think tags deleted from each line again);
    `strip_reasoning` as every evaluation of this pipeline does (`calibft.lm.chat.strip_reasoning`).
    """
    if rule == "release":
        lines = (_WHITESPACE.sub(" ", _RELEASE_THINK_TAG.sub("", line).strip()) for line in release_lines(text))
    elif rule == "strip_reasoning":
        lines = (" ".join(line.split()) for line in strip_reasoning(text).splitlines())
    else:
        raise ValueError(f"rule must be one of {NORMALIZATIONS}, got {rule!r}")
    answer = next((line for line in lines if line), "")
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in QUOTES:
        answer = answer[1:-1].strip()
    return answer


def release_lines(text: str) -> list[str]:
    """The lines the release's `normalize_open_random_output` looks through: `<think>...</think>` blocks and
    everything from an unclosed `<think>` on removed, then every `<think>` or `</think>` tag left deleted where it
    stands (so "Rome</think>Milan" reads "RomeMilan"), all case-insensitively."""
    text = _RELEASE_UNCLOSED_THINK.sub("", _RELEASE_THINK_BLOCK.sub("", text)).strip()
    return _RELEASE_THINK_TAG.sub("", text).strip().splitlines()


def unique_fraction(texts: Sequence[str], rule: str = "release") -> float | None:
    """Distinct non-empty normalized answers per sample (None without samples)."""
    if not texts:
        return None
    answers = {normalize(text, rule) for text in texts}
    answers.discard("")
    return len(answers) / len(texts)


def resampled_distinct(answers: Sequence[str], rng: np.random.Generator, replicates: int) -> np.ndarray:
    """[replicates]: the number of distinct non-empty answers among each replicate's resample of `answers` (as
    many as there are, drawn with replacement)."""
    labels, codes = np.unique(np.asarray(answers, dtype=object), return_inverse=True)
    codes = np.where(labels[codes] == "", -1, codes)  # the empty answer counts for nothing
    drawn = np.sort(codes[resample_indices(rng, len(codes), replicates)], axis=1)
    first = np.ones(drawn.shape, dtype=bool)  # the first of each run of equal codes in a sorted row
    first[:, 1:] = drawn[:, 1:] != drawn[:, :-1]
    return (first & (drawn >= 0)).sum(axis=1)


def open_ended_draws(
    answers: Sequence[Sequence[str]], support: np.ndarray, estimate: float | None, rng, replicates: int
) -> dict:
    """[replicates] of each aggregate of `score` over resamples of the samples within each prompt (the prompts
    fixed, drawn in order); `estimate` is `score`'s mean unique fraction.

    The mean unique fraction over the prompts with samples: a resample holds only answers the run saw, and
    repeats some, so its fraction falls below the estimate by a shift that is the resampling's own (several
    standard errors: the plain percentile interval would almost never hold the estimate). The replicates are
    therefore re-centred on the estimate (shifted by the estimate minus their mean, then clipped to [0, 1]),
    keeping the bootstrap's spread (docs/metrics.md, Intervals). The mean support comes from one forward pass
    per prompt and is the same in every replicate."""
    support_draws = np.full(replicates, float(np.mean(support)))
    sampled = [a for a in answers if len(a)]
    if not sampled:
        return {"support": support_draws, "unique_fraction": np.full(replicates, math.nan)}
    unique = np.mean([resampled_distinct(a, rng, replicates) / len(a) for a in sampled], axis=0)
    centred = np.clip(unique - unique.mean() + estimate, 0.0, 1.0)
    return {"support": support_draws, "unique_fraction": centred}


def first_token_support(
    probs: np.ndarray | torch.Tensor, thresholds: Sequence[float] = OPEN_ENDED_THRESHOLDS, numerics: str = "fp32"
) -> np.ndarray:
    """For each threshold t, the smallest k whose k most probable tokens hold at least t of the mass.

    `probs` [..., vocab] gives [..., len(thresholds)]. Ties between equal probabilities do not change k.

    `numerics` (the `numerics` switch of `calibft.core.protocol`): `fp32` computes in float64; a coverage within
    `COVERAGE_TOLERANCE` below t counts as reaching it, so [0.5, 0.3, 0.2] covers 0.8 with 2 tokens although
    0.5 + 0.3 may round below 0.8, and coverage is relative to the row's total, so rows need not sum to exactly 1.
    `logits_dtype` follows the authors' release in the dtype of `probs` (a tensor; bf16 on GPUs) and on its
    device: each row sorted, its running sum taken by `torch.cumsum` in that dtype, compared with t in that dtype
    (0.9 is 0.8984375 in bf16), k the first position that reaches t, the vocabulary size if none does; neither
    tolerance nor renormalization.
    """
    if numerics == "logits_dtype":
        return _release_support(torch.as_tensor(probs), thresholds)
    if numerics != "fp32":
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    if isinstance(probs, torch.Tensor):
        probs = probs.double().cpu().numpy()
    probs = np.asarray(probs, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    _check_support_inputs(probs.shape, bool(np.any(probs < 0)), t)
    rows = probs.reshape(-1, probs.shape[-1])
    coverage = np.cumsum(-np.sort(-rows, axis=-1), axis=-1)
    coverage /= coverage[:, -1:]
    # k = 1 + the number of prefixes below t (coverage is non-decreasing, so a binary search finds them)
    k = np.stack([np.searchsorted(row, t - COVERAGE_TOLERANCE, side="left") for row in coverage]) + 1
    return np.minimum(k, probs.shape[-1]).reshape(*probs.shape[:-1], len(t))


def _check_support_inputs(shape: Sequence[int], negative: bool, t: np.ndarray) -> None:
    if len(shape) == 0 or shape[-1] == 0 or negative:
        raise ValueError("probs must be non-negative with at least one token")
    if np.any((t <= 0) | (t > 1)):
        raise ValueError(f"thresholds must be in (0, 1], got {t.tolist()}")


def _release_support(probs: torch.Tensor, thresholds: Sequence[float]) -> np.ndarray:
    """`first_token_support` with `numerics="logits_dtype"`: the release's `top_p_support_sizes`, row by row
    (a 1-D sort and cumsum per row, as it calls them)."""
    _check_support_inputs(probs.shape, bool((probs < 0).any()), np.asarray(thresholds, dtype=np.float64))
    rows = probs.reshape(-1, probs.shape[-1])
    found = []
    for row in rows:
        coverage = torch.cumsum(torch.sort(row, descending=True).values, dim=0)
        reached = torch.stack([coverage >= float(t) for t in thresholds])  # [thresholds, vocab]
        first = reached.to(torch.uint8).argmax(dim=-1) + 1  # argmax gives the first maximum
        found.append(torch.where(reached.any(dim=-1), first, len(row)))
    support = torch.stack(found).cpu().numpy()
    return support.reshape(*probs.shape[:-1], len(thresholds))


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

    `release`: the decoded text (special tokens skipped, surrounding whitespace stripped, reasoning kept), as the
    release's HF backend hands it to its normalization; `strip_reasoning`: `calibft.lm.generation.sample_texts`,
    reasoning stripped as well. Both draw the same tokens.
    """
    if rule == "strip_reasoning":
        return sample_texts(model, tokenizer, prompt_ids, settings, seed)
    if rule != "release":
        raise ValueError(f"rule must be one of {NORMALIZATIONS}, got {rule!r}")
    generations = sample(model, prompt_ids, settings, stop_token_ids(model, tokenizer), seed)
    texts = [tokenizer.decode(list(ids), skip_special_tokens=True).strip() for ids in generations.token_ids]
    return texts, generations.finished


def sample_records(
    prompt_index: int, prompt: str, texts: Sequence[str], finished: np.ndarray, rule: str = "release"
) -> list[dict]:
    """One record per answer, with the normalized form it counts as under `rule`."""
    return [
        {
            "prompt_index": prompt_index,
            "prompt": prompt,
            "index": i,
            "text": text,
            "normalized": normalize(text, rule),
            "finished": bool(done),
        }
        for i, (text, done) in enumerate(zip(texts, finished, strict=True))
    ]


def score(
    prompts: Sequence[str],
    records: Sequence[dict],
    supports: Sequence[dict],
    thresholds: Sequence[float],
    headline_threshold: float = OPEN_ENDED_HEADLINE_THRESHOLD,
    replicates: int = 0,
    bootstrap_seed: int = 0,
    normalization: str = "release",
    **header,
) -> dict:
    """metrics.json: per prompt the support at the headline threshold and the unique fraction (from the stored
    texts, normalized again by the rule `normalization`), and their means over prompts, with the mean support at
    every threshold; with `replicates`, the percentile bootstrap interval of each mean over resamples of the
    samples within each prompt (`intervals`, `open_ended_draws`, seeded by `bootstrap_seed`)."""
    thresholds = [float(t) for t in thresholds]
    column = thresholds.index(headline_threshold)
    texts: list[list[str]] = [[] for _ in prompts]
    for record in records:
        texts[record["prompt_index"]].append(record["text"])
    support = {row["prompt_index"]: row["support"] for row in supports}
    rows = [
        {
            "prompt_index": i,
            "prompt": prompt,
            "samples": len(texts[i]),
            "support": support[i][column],
            "unique_fraction": unique_fraction(texts[i], normalization),
        }
        for i, prompt in enumerate(prompts)
    ]
    fractions = [row["unique_fraction"] for row in rows if row["unique_fraction"] is not None]
    table = np.array([support[i] for i in range(len(prompts))], dtype=np.float64)
    metrics = {
        **header,
        "thresholds": thresholds,
        "headline_threshold": headline_threshold,
        "aggregate": {
            "support": float(np.mean([row["support"] for row in rows])),
            "unique_fraction": float(np.mean(fractions)) if fractions else None,
            "support_by_threshold": table.mean(axis=0).tolist(),
            "num_prompts": len(rows),
        },
        "prompts": rows,
    }
    if replicates:
        answers = [[normalize(text, normalization) for text in prompt_texts] for prompt_texts in texts]
        headline = np.array([row["support"] for row in rows], dtype=np.float64)
        estimate = metrics["aggregate"]["unique_fraction"]
        draws = open_ended_draws(answers, headline, estimate, np.random.default_rng(bootstrap_seed), replicates)
        metrics["intervals"] = interval_block(draws, bootstrap_seed, "samples within prompts")
    return metrics


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


if __name__ == "__main__":
    main()
