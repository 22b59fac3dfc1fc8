"""Benchmark of the exact pass (`calibft.lm.trie_walk`) against 1,000 sampled answers: tokens forwarded and seconds per
prompt, projected to the paper's models.

    python benchmarks/exact_pass.py [--model PATH] [--prompts 6] [--answers 1000] [--plain-prompts 1]

For `--prompts` prompts evenly spaced over the unseen split, on the evaluation space (d=5, 16,384 bins, its trie
for the model's tokenizer):

- exact: the trie walk, which forwards the prompt and one token per internal node of the trie;
- adaptive: the adaptive walk at `--tolerance` (of the normalized W1 and of the mass on the space), which
  expands the most probable prefixes until the certified bounds on both are that narrow
  (`calibft.evals.exact.bounds`), with the prompt's mass on the space, the share of the internal nodes it
  expanded and the widths of its bounds;
- sampling: `--answers` answers from the sampling engine (temperature 1), which forwards the prompt and every
  answer token but the last (the stop token is sampled, not fed);
- plain: every value scored alone, prompt and value in one uncached forward pass each (what the walk replaces),
  timed on the first `--plain-prompts` prompts.

The projection multiplies each way's tokens per prompt by 2 FLOPs per parameter and token (`params_b` of the
models of config.yaml; GPT-OSS counts all its parameters, not its active ones). The tokens are those of the
benchmarked model's tokenizer, which writes one digit per token as Qwen3's and Gemma-3's do; tokenizers that
group digits (Llama 3, GPT-OSS) have fewer trie nodes. Attention over the prompt is left out of the FLOPs.
The model is `benchmarks/tiny_model.py`'s. Runs on the GPU when there is one. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tiny_model import CHAT, add_model_arguments, loaded_model, timed
from calibft.data.families import family
from calibft.data.grid import evenly_spaced, prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import Trie, trie_set_for_spaces
from calibft.evals.exact.bounds import SpaceBounds, Tolerance, mass_bounds
from calibft.evals.metrics import EXACT_W1_LEVELS, coupling_quantiles, w1_scale
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import SamplingSettings, inference, input_device, sample
from calibft.lm.trie_walk import NextToken, adaptive_node_log_probs, forwarded_tokens, value_probabilities
from calibft.pipeline.config import read_config

REPO = Path(__file__).resolve().parents[1]
PLAIN_BATCH = 256


def plain_scores(model, prompt_ids: list[int], trie: Trie) -> np.ndarray:
    """Every value's log-probability from its own uncached forward pass (prompt + value), PLAIN_BATCH values per
    call, the values of a batch right-padded and masked."""
    device = input_device(model)
    values = [trie.value_tokens(v).tolist() for v in range(len(trie.value_leaf))]
    out = []
    with inference(model):
        for start in range(0, len(values), PLAIN_BATCH):
            batch = values[start : start + PLAIN_BATCH]
            width = max(map(len, batch))
            ids = torch.zeros((len(batch), len(prompt_ids) + width), dtype=torch.long, device=device)
            mask = torch.zeros_like(ids)
            for row, value in enumerate(batch):
                ids[row, : len(prompt_ids) + len(value)] = torch.tensor(prompt_ids + value)
                mask[row, : len(prompt_ids) + len(value)] = 1
            log_softmax = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
            for row, value in enumerate(batch):
                steps = torch.arange(len(prompt_ids) - 1, len(prompt_ids) - 1 + len(value), device=device)
                out.append(float(log_softmax[row, steps, torch.tensor(value, device=device)].sum()))
    return np.array(out)


def adaptive_pass(model, prompt_ids, trie, values, quantiles, scale, tolerance: Tolerance, batch_nodes, next_token):
    """The adaptive walk as the exact evaluation runs it: (walk, the widths of its bounds). The law's `quantiles`
    are the evaluation's, which its W1 needs whichever walk runs."""
    bounds = SpaceBounds(trie, values, quantiles)
    walk = adaptive_node_log_probs(
        model, prompt_ids, trie, lambda w: tolerance.met(bounds, bounds.partial(w), scale), batch_nodes, next_token
    )
    partial = bounds.partial(walk)
    low, high = bounds.w1(partial)
    return walk, {"w1_norm_width": (high - low) / scale, "mass_width": float(np.diff(mass_bounds(partial))[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--prompts", type=int, default=6, help="unseen prompts, evenly spaced")
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-nodes", type=int, default=256)
    parser.add_argument("--plain-prompts", type=int, default=1, help="prompts whose values are also scored alone")
    parser.add_argument("--tolerance", type=float, default=0.001, help="the adaptive walk's, of W1 norm. and mass")
    args = parser.parse_args()

    with loaded_model(args, "fp32") as loaded:
        model, tokenizer, stops, device = loaded.model, loaded.tokenizer, loaded.stops, loaded.device
        chosen = evenly_spaced(prompts("unseen"), args.prompts)
        spaces = spaces_for_prompts(chosen, 5, 16384)
        tries = trie_set_for_spaces(tokenizer, SpaceSet.from_spaces([p.id for p in chosen], spaces))
        settings = SamplingSettings(args.answers, args.max_new_tokens, batch_size=args.answers)
        tolerance = Tolerance(args.tolerance, args.tolerance)
        rows = []
        for i, prompt in enumerate(chosen):
            ids, trie = chat_prompt_ids(tokenizer, prompt.prompt, CHAT), tries.trie(i)
            next_token = NextToken(stop_ids=tuple(stops))
            exact_s, (probs, _) = timed(device, value_probabilities, model, ids, trie, args.batch_nodes, next_token)
            values = np.asarray(spaces[i].values).astype(np.float64)
            law = family(prompt.family).law(prompt.params)
            adaptive_s, (walk, widths) = timed(
                device, adaptive_pass, model, ids, trie, values, coupling_quantiles(law, EXACT_W1_LEVELS),
                w1_scale(law), tolerance, args.batch_nodes, next_token,
            )  # fmt: skip
            sampling_s, drawn = timed(device, sample, model, ids, settings, stops, i + 1)
            # an answer feeds every token it drew but the last (its stop token, or the one at max_new_tokens)
            fed = sum(len(t) - (not done) for t, done in zip(drawn.token_ids, drawn.finished, strict=True))
            row = {
                "id": prompt.id,
                "mass_on_space": round(float(probs.sum()), 6),
                "exact_tokens": forwarded_tokens(len(ids), trie, args.batch_nodes),
                "adaptive_tokens": walk.tokens,
                "sampling_tokens": len(ids) + fed,
                "plain_tokens": int(len(trie.value_leaf) * len(ids) + trie.value_length.sum()),
                "adaptive_expanded_share": round(float(walk.expanded.sum() / (trie.child_count > 0).sum()), 4),
                **{key: round(value, 6) for key, value in widths.items()},
                "exact_s": round(exact_s, 3),
                "adaptive_s": round(adaptive_s, 3),
                "sampling_s": round(sampling_s, 3),
            }  # fmt: skip
            if i < args.plain_prompts:
                plain_s, _ = timed(device, plain_scores, model, ids, trie)
                row["plain_s"] = round(plain_s, 3)
            rows.append(row)

    def mean(key: str) -> float:
        return float(statistics.mean(row[key] for row in rows if key in row))

    models = read_config(REPO / "config.yaml")["models"]
    tera = 1e12
    projected = {
        name: {
            way: round(2 * entry["params_b"] * 1e9 * mean(f"{way}_tokens") / tera, 2)
            for way in ("exact", "adaptive", "sampling")
        }
        for name, entry in models.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "exact_pass",
                "device": loaded.device_name,
                "torch_threads": torch.get_num_threads(),
                "model": loaded.name,
                "prompts": len(rows),
                "values_per_prompt": round(float(np.diff(tries.value_offsets).mean()), 1),
                "trie_nodes_per_prompt": round(float(np.diff(tries.node_offsets).mean()), 1),
                "answers": args.answers,
                "exact_tokens_per_prompt": round(mean("exact_tokens"), 1),
                "sampling_tokens_per_prompt": round(mean("sampling_tokens"), 1),
                "plain_tokens_per_prompt": round(mean("plain_tokens"), 1),
                "exact_over_sampling_tokens": round(mean("exact_tokens") / mean("sampling_tokens"), 2),
                "adaptive_tokens_per_prompt": round(mean("adaptive_tokens"), 1),
                "tolerance": {"w1_norm": tolerance.w1_norm, "mass": tolerance.mass},
                "exact_s_per_prompt": round(mean("exact_s"), 3),
                "adaptive_s_per_prompt": round(mean("adaptive_s"), 3),
                "sampling_s_per_prompt": round(mean("sampling_s"), 3),
                "adaptive_over_sampling_s": round(mean("adaptive_s") / mean("sampling_s"), 2),
                "adaptive_over_exact_s": round(mean("adaptive_s") / mean("exact_s"), 2),
                "plain_s_per_prompt": round(mean("plain_s"), 3) if args.plain_prompts else None,
                "plain_prompts": min(args.plain_prompts, len(rows)),
                "projected_tflop_per_prompt": projected,
                "per_prompt": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
