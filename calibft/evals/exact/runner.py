"""What `python -m calibft.evals.exact JOB` runs: one `ExactJob`, the model's probability of every value of each
prompt's evaluation space (a full or an adaptive trie walk, checkpointed per prompt), then probabilities.npz,
metrics.json (`calibft.evals.exact.metrics.score`) and provenance.json."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, save_npz, write_json
from calibft.core.ragged import offsets
from calibft.data.families import family
from calibft.data.grid import prompts, select
from calibft.data.output_space import SpaceSet
from calibft.data.trie import TrieSet
from calibft.evals.exact.bounds import SpaceBounds, Tolerance, figure_bounds
from calibft.evals.exact.job import ExactJob
from calibft.evals.exact.metrics import prompt_metrics, score, space_values
from calibft.evals.metrics import EXACT_W1_LEVELS, coupling_quantiles, w1_scale
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import stop_token_ids
from calibft.lm.trie_walk import NextToken, adaptive_node_log_probs, forwarded_tokens, value_probabilities


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
    run(read_job(ExactJob, "calibft.evals.exact", sys.argv[1:] if argv is None else argv))
