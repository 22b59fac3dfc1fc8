"""Benchmark of one optimizer step: soft-target and hard-target objectives against a plain causal-LM step.

    python benchmarks/train_step.py [--hidden 512] [--layers 4] [--vocab 32000] [--steps 20]

All three steps train the same LoRA model on batches of the same shape: 8 training prompts in the tiny
model's chat format, each followed by a canonical answer. The soft step samples trie paths and computes
the trie KL (`calibft.training.objectives.soft_batch_loss`); the hard step samples and tokenizes canonical strings and
computes the completion cross-entropy (`hard_batch_loss`); the plain step is the usual
`model(input_ids, labels=...)` cross-entropy over the same sequences, logits over every position. The
model is a randomly initialized Qwen3 of the given size (the vocabulary sets the cost of the LM head, as
in the paper's models). Prints one JSON line with the median milliseconds per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import Qwen3Config, Qwen3ForCausalLM

from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import trie_set_for_spaces
from calibft.demo.tiny_model import train_tokenizer, training_chats
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.models import attach_lora
from calibft.training.objectives import hard_batch_loss, make_batch, soft_batch_loss

LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def _timed_steps(step, optimizer, steps: int) -> float:
    """Median milliseconds of `step()` + backward + optimizer step, after two warm-up steps."""
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        step(i).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)

    tokenizer = train_tokenizer(training_chats(), 512, 512)
    chosen = prompts("train")[::83]
    spaces = SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, 5, 1001))
    tries = trie_set_for_spaces(tokenizer, spaces)
    options = ChatOptions.from_config({"template_kwargs": {"enable_thinking": False}})
    prompt_ids = [chat_prompt_ids(tokenizer, p.prompt, options) for p in chosen]

    config = Qwen3Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=args.hidden // 8,
        tie_word_embeddings=True,
    )
    model = attach_lora(Qwen3ForCausalLM(config), LORA)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    pad = tokenizer.pad_token_id

    def items(i: int) -> np.ndarray:
        return (np.arange(args.batch) + i * args.batch) % len(chosen)

    def values(data, i: int) -> np.ndarray:
        """Step i's training answers."""
        return data.sample_values(items(i), np.random.default_rng(i))

    def soft(i: int) -> torch.Tensor:
        return soft_batch_loss(model, tries, items(i), prompt_ids, pad, values(tries, i))[0]

    def hard(i: int) -> torch.Tensor:
        return hard_batch_loss(model, spaces, items(i), prompt_ids, pad, values(spaces, i), tokenizer)[0]

    def plain(i: int) -> torch.Tensor:
        # the same sequences as the soft step, with the usual labels: full logits, shifted cross-entropy
        targets = tries.path_targets(items(i), values(tries, i))
        batch = make_batch([prompt_ids[j] for j in items(i)], targets.tokens, targets.lengths, pad)
        labels = torch.full_like(batch.input_ids, -100)
        columns = batch.input_ids.shape[1] - batch.width + batch.step_column
        labels[batch.step_example, columns] = batch.step_target
        return model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            labels=labels,
        ).loss

    figures = {
        name: _timed_steps(fn, optimizer, args.steps) for name, fn in (("plain", plain), ("soft", soft), ("hard", hard))
    }
    print(
        json.dumps(
            {
                "benchmark": "train_step",
                "model": {"hidden": args.hidden, "layers": args.layers, "vocab": args.vocab},
                "batch": args.batch,
                "plain_ce_ms_per_step": round(figures["plain"], 1),
                "soft_ms_per_step": round(figures["soft"], 1),
                "hard_ms_per_step": round(figures["hard"], 1),
                "soft_over_plain": round(figures["soft"] / figures["plain"], 3),
                "hard_over_plain": round(figures["hard"] / figures["plain"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
