"""Exact structured evaluation (docs/metrics.md, Exact distribution on the output space).

    python -m calibft.evals.exact_structured JOB     # JOB: an ExactJob as JSON text or file

For one model, condition and split, every prompt that the structured evaluation sampled gets the model's
probability of every value of the evaluation space (`calibft.lm.trie_walk`: the sampling settings in force, any of the
engine's stop tokens ending a value), and from them, free of sampling noise:

- `mass`: the probability that the answer is exactly one of the space's canonical strings;
- `kl_on_space` and `kl_sequences`: KL(target || model), the model renormalized on the space or not
  (`calibft.evals.metrics.exact_kl`);
- `w1`, `w1_norm`: the W1 of the model's distribution renormalized on the space, by the sampled W1's coupling
  (`exact_wasserstein1`).

It then sets the structured evaluation's samples of the same run against that distribution. `sampled` is the
paper's sampled W1 (every valid answer) with the spread that as many draws from the exact distribution give;
`on_space` keeps the answers whose text is a canonical string of the space, the same event as the exact
distribution's, so that their W1 falls within its spread (`within`) for about 99% of prompts when the engine
samples what the exact pass computes.

Every figure comes with certified bounds (`bounds`, per prompt and for the aggregates): a full walk's are the
figure itself. With a tolerance above 0 (`ExactJob.w1_norm_tolerance`, `mass_tolerance`), the walk expands only
the most probable prefixes until the bounds on the normalized W1 and the mass are that narrow
(`calibft.evals.exact_bounds`), and the figures are those of the completion it reports.

Outputs in `out_dir`: `probabilities.npz` (per prompt, with offsets: the values, the model's probabilities and
the target's) and `metrics.json` (per prompt, per family, aggregate). With a `checkpoint_dir`, each prompt's
probabilities are kept there as soon as they are computed, and a restarted job computes only the rest.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, save_npz, write_json
from calibft.core.ragged import offsets
from calibft.data.families import family
from calibft.data.grid import Prompt, prompts, select
from calibft.data.output_space import SpaceSet
from calibft.data.trie import TrieSet
from calibft.evals.exact_bounds import SpaceBounds, Tolerance, figure_bounds
from calibft.evals.exact_structured_job import ExactJob
from calibft.evals.metrics import (
    EXACT_W1_LEVELS,
    coupling_quantiles,
    exact_aggregate,
    exact_kl,
    exact_wasserstein1,
    family_rows,
    finite_or_none,
    sampled_w1_spread,
    undefined_families,
    w1_scale,
    wasserstein1,
)
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import stop_token_ids
from calibft.lm.trie_walk import NextToken, adaptive_node_log_probs, forwarded_tokens, value_probabilities


def space_values(strings: np.ndarray) -> np.ndarray:
    """float64 values of a space's canonical strings (bytes)."""
    return np.asarray(strings).astype(np.float64)


def on_space_indices(records: Sequence[dict], strings: np.ndarray) -> np.ndarray:
    """The index in the space of every answer whose text is one of its canonical `strings`, in answer order."""
    index = {string.decode(): i for i, string in enumerate(strings.tolist())}
    found = (index.get(record["text"]) for record in records)
    return np.array([i for i in found if i is not None], dtype=np.int64)


def _normalized(w1: float, scale: float) -> float | None:
    return finite_or_none(w1 / scale) if scale > 0 else None


def _spread(values, probs, law, n: int, draws: int, rng, scale: float) -> list[float] | None:
    spread = sampled_w1_spread(values, probs, law, n, draws, rng)
    if spread is None or not scale > 0:
        return None
    return [float(spread[0] / scale), float(spread[1] / scale)]


def prompt_metrics(
    prompt: Prompt,
    values: np.ndarray,
    strings: np.ndarray,
    model_probs: np.ndarray,
    target_probs: np.ndarray,
    records: Sequence[dict],
    draws: int,
    rng: np.random.Generator,
    bounds: dict[str, list[float | None]] | None = None,
    quantiles: np.ndarray | None = None,
) -> dict:
    """The figures of one prompt: the exact ones with their bounds (`bounds` from a partial walk, where
    `model_probs` is its reported completion; None: a full walk, whose figures are their own bounds), and the
    structured samples set against the exact distribution. `quantiles`: the law's for the exact W1, when
    computed already."""
    law = family(prompt.family).law(prompt.params)
    scale = w1_scale(law)
    kl = exact_kl(target_probs, model_probs)
    w1 = exact_wasserstein1(values, model_probs, law, quantiles=quantiles)
    figures = {"mass": kl["mass"], "w1": w1, "kl_on_space": kl["on_space"], "kl_sequences": kl["sequences"]}
    if bounds is None:
        bounds = {name: [finite_or_none(value)] * 2 for name, value in figures.items()}
    bounds = {**bounds, "w1_norm": [None if side is None else _normalized(side, scale) for side in bounds["w1"]]}

    valid = np.array([r["value"] for r in records if r["valid"]], dtype=np.float64)
    on_space = values[on_space_indices(records, strings)]
    sampled_norm = _normalized(wasserstein1(valid, law), scale)
    on_space_norm = _normalized(wasserstein1(on_space, law), scale)
    sampled_spread = _spread(values, model_probs, law, len(valid), draws, rng, scale)
    on_space_spread = _spread(values, model_probs, law, len(on_space), draws, rng, scale)
    within = None
    if on_space_norm is not None and on_space_spread is not None:
        within = on_space_spread[0] <= on_space_norm <= on_space_spread[1]
    return {
        "id": prompt.id,
        "family": prompt.family,
        "params": dict(prompt.params),
        "mass": kl["mass"],
        "kl_on_space": finite_or_none(kl["on_space"]),
        "kl_sequences": finite_or_none(kl["sequences"]),
        "w1": finite_or_none(w1),
        "w1_scale": scale,
        "w1_norm": _normalized(w1, scale),
        "sampled": {"samples": len(records), "valid": len(valid), "w1_norm": sampled_norm, "spread": sampled_spread},
        "on_space": {"samples": len(on_space), "w1_norm": on_space_norm, "spread": on_space_spread, "within": within},
        "bounds": bounds,
    }


BOUNDED = ("w1_norm", "kl_on_space", "kl_sequences", "mass")  # the aggregates that get bounds


def aggregate_bounds(rows: Sequence[dict], kl_across_families: str = "mean") -> dict[str, list[float | None]]:
    """[lowest, highest] of each aggregate: the aggregate of the prompts' lower and of their upper bounds (means
    and medians grow with each of their values), over the prompts that have a value; the upper one None where one
    of those prompts has none."""
    sides = [
        exact_aggregate(
            [{**row, **{k: None if row[k] is None else row["bounds"][k][side] for k in BOUNDED}} for row in rows],
            kl_across_families,
        )
        for side in (0, 1)
    ]
    unbounded = {k: any(row[k] is not None and row["bounds"][k][1] is None for row in rows) for k in BOUNDED}
    return {k: [sides[0][k], None if unbounded[k] else sides[1][k]] for k in BOUNDED}


def score(rows: Sequence[dict], kl_across_families: str = "mean", **header) -> dict:
    """metrics.json from the per-prompt rows: per family (means) and aggregate (`exact_aggregate`), and how many
    prompts' on-space sampled W1 lies within its spread."""
    aggregate = exact_aggregate(rows, kl_across_families)
    means = aggregate.pop("family_means")
    families = family_rows(means, [row["family"] for row in rows])
    verdicts = [row["on_space"]["within"] for row in rows if row["on_space"]["within"] is not None]
    within = {
        "prompts": len(verdicts),
        "within": int(sum(verdicts)),
        "fraction": sum(verdicts) / len(verdicts) if verdicts else None,
    }
    return {
        **header,
        "aggregate": {
            **aggregate,
            "bounds": aggregate_bounds(rows, kl_across_families),
            "within_spread": within,
            "num_families": len(families),
            "undefined_families": undefined_families(means["w1_norm"]),
        },
        "families": families,
        "prompts": list(rows),
    }


def run(job: ExactJob) -> None:
    started = time.time()
    tokenizer, model = job.load()
    tries, spaces = TrieSet.load(job.tries), SpaceSet.load(job.space)
    if job.prompt_ids is not None:
        tries = tries.subset(job.prompt_ids)
    chosen = select(prompts(job.split), list(tries.ids))
    options = job.chat_options()
    settings = job.settings()
    tolerance = Tolerance(job.w1_norm_tolerance, job.mass_tolerance)
    next_token = NextToken(settings.temperature, settings.top_p, tuple(stop_token_ids(model, tokenizer)))
    samples: dict[str, list[dict]] = {p.id: [] for p in chosen}
    for record in read_jsonl(job.samples):
        if record["id"] in samples:
            samples[record["id"]].append(record)

    checkpoint = checkpoint_folder(job)
    rows, stored = [], {"values": [], "model_probs": [], "target_probs": []}
    for i, prompt in enumerate(tqdm(chosen, desc=f"exact {job.model_key}/{job.condition}/{job.split}")):
        trie, space = tries.trie(i), spaces.space(spaces.index(prompt.id))
        if not np.array_equal(trie.value_probs, space.probs):
            raise ValueError(f"{prompt.id}: the tries {job.tries} were not built from the space {job.space}")
        ids = chat_prompt_ids(tokenizer, prompt.prompt, options, None, job.protocol["prompt_bos"])
        law = family(prompt.family).law(prompt.params)
        quantiles = coupling_quantiles(law, EXACT_W1_LEVELS)

        def compute(ids=ids, trie=trie, prompt=prompt, space=space, law=law, quantiles=quantiles):
            if tolerance.full_walk:
                probs, _ = value_probabilities(model, ids, trie, job.batch_nodes, next_token)
                tokens = forwarded_tokens(len(ids), trie, job.batch_nodes)
                return [{"id": prompt.id, "model_probs": probs.tolist(), "forwarded_tokens": tokens}]
            bounds = SpaceBounds(trie, space_values(space.values), quantiles)
            scale = w1_scale(law)
            walk = adaptive_node_log_probs(
                model, ids, trie, lambda w: tolerance.met(bounds, bounds.partial(w), scale), job.batch_nodes, next_token
            )
            partial = bounds.partial(walk)
            return [
                {
                    "id": prompt.id,
                    "model_probs": partial.completed().tolist(),
                    "forwarded_tokens": walk.tokens,
                    "bounds": figure_bounds(bounds, partial),
                }
            ]

        (result,) = per_prompt(checkpoint, prompt.id, compute)
        values, model_probs = space_values(space.values), np.asarray(result["model_probs"], dtype=np.float64)
        rng = np.random.default_rng(job.seed_of("exact_spread", prompt.id))
        row = prompt_metrics(
            prompt,
            values,
            space.values,
            model_probs,
            space.probs,
            samples[prompt.id],
            job.spread_draws,
            rng,
            result.get("bounds"),
            quantiles,
        )
        rows.append({**row, "forwarded_tokens": result["forwarded_tokens"]})
        for name, array in (("values", values), ("model_probs", model_probs), ("target_probs", space.probs)):
            stored[name].append(array)

    out = Path(job.out_dir)
    arrays = {name: np.concatenate(parts) for name, parts in stored.items()}
    arrays |= {
        "ids": np.array([p.id for p in chosen], dtype=str),
        "offsets": offsets([len(v) for v in stored["values"]]),
    }
    save_npz(out / "probabilities.npz", arrays, {"space": job.space, "tries": job.tries})
    header = job.header(
        "exact", split=job.split, samples_per_prompt=settings.num_samples, next_token=dict(
            temperature=next_token.temperature, top_p=next_token.top_p, stop_ids=list(next_token.stop_ids)
        ), wall_time_s=time.time() - started,
    )  # fmt: skip
    write_json(out / "metrics.json", score(rows, job.protocol["logit_kl_across_families"], **header))
    job.write_provenance(model, tokenizer, job.generation(), tries=job.tries, space=job.space, samples=job.samples)
    finish_checkpoints(checkpoint)


def main(argv: list[str] | None = None) -> None:
    run(read_job(ExactJob, "calibft.evals.exact_structured", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
