"""The structured evaluation's computations from texts and numbers: each sample's answer taken out of its text
and parsed (`answer_part`, `sample_records`), each prompt's figures (`prompt_metrics`) and metrics.json (`score`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from calibft.data.families import family
from calibft.data.grid import Prompt
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
from calibft.evals.structured import ssot
from calibft.evals.structured.job import StructuredJob
from calibft.lm.chat import strip_model_response, strip_thinking_trace


def answer_part(job: StructuredJob) -> Callable[[str], str | None]:
    """What takes the answer out of a sampled text, decoded as `calibft.lm.chat.decode_output` decodes under the
    protocol's `answer_reasoning`: the release's SSOT rule or the job's `answer_pattern` (`extractor`), and

    - under `strip_reasoning` nothing more: the decoded text is already clean of reasoning;
    - under `release` the release's steps around it (inference/ssot.py, lines 224-229; eval/protocol_runner.py,
      lines 100-102): for SSOT `strip_model_response` before extraction (`<think>` blocks removed for a model
      with `release_strips_thinking`, its Qwen3 family), then `strip_thinking_trace` of the answer, for both
      evaluations.
    """
    extract = extractor(job)
    if job.protocol["answer_reasoning"] == "strip_reasoning":
        return extract

    def release(text: str) -> str | None:
        if job.evaluation == "ssot":
            text = strip_model_response(text, job.release_strips_thinking)
        answer = extract(text)
        return None if answer is None else strip_thinking_trace(answer)

    return release


def extractor(job: StructuredJob) -> Callable[[str], str | None]:
    """What takes the answer part of an output: the release's rule, or the job's `answer_pattern`."""
    if job.release_prompts is None:
        return lambda text: extract_answer(text, job.answer_pattern)
    gpt_oss = ssot.STYLES[job.release_style].gpt_oss_output
    return lambda text: ssot.extract_answer(text, gpt_oss=gpt_oss)


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
