"""Benchmark of the sampling engine against plain `model.generate`: answers per second for one prompt.

    python benchmarks/sampling.py [--model PATH] [--answers 1000] [--max-new-tokens 32] [--plain-batch 16]

Both draw `--answers` answers to one training prompt of the tiny model with pure sampling (temperature 1,
top_p 1, no top-k) and at most `--max-new-tokens` new tokens. Plain is the authors' setting: `model.generate`
on the prompt repeated `--plain-batch` times per call (a smaller last call makes the count exact). The engine
is `calibft.lm.generation.sample`: one prefill, then decode batches of `--batch-size` answers. Each side runs once
untimed, then `--repeats` timed times; the medians are reported. The model is `benchmarks/tiny_model.py`'s.
Runs on the GPU when there is one.
Prints one JSON line; answers/s are `--answers` over the median seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tiny_model import CHAT, add_model_arguments, loaded_model, timed
from calibft.data.grid import prompts
from calibft.lm.chat import chat_prompt_ids
from calibft.lm.generation import SamplingSettings, sample


def _timed(run: Callable[[int], list[int]], repeats: int, device: torch.device) -> tuple[float, list[int]]:
    """Median seconds of `run(i)` (which returns the answer lengths) after one untimed warm-up, and all lengths.

    The warm-up is a full-size call, so that the timed ones do not pay for first allocations of the large buffers.
    """
    run(-1)
    times, lengths = [], []
    for i in range(repeats):
        seconds, drawn = timed(device, run, i)
        times.append(seconds)
        lengths += drawn
    return statistics.median(times), lengths


def plain_generate(
    model,
    prompt_ids: list[int],
    answers: int,
    plain_batch: int,
    max_new_tokens: int,
    stops: list[int],
    pad_id: int,
    seed: int,
) -> list[int]:
    """The authors' way: `model.generate` with pure sampling on the prompt repeated `plain_batch` times per call (a
    smaller last call makes the count exact); the length of each answer up to its stop token."""
    device = next(model.parameters()).device
    prompt = torch.tensor([prompt_ids], device=device)
    torch.manual_seed(seed)
    lengths = []
    with torch.inference_mode():
        for start in range(0, answers, plain_batch):
            rows = min(plain_batch, answers - start)
            out = model.generate(
                prompt.expand(rows, -1),
                attention_mask=torch.ones((rows, len(prompt_ids)), dtype=torch.long, device=device),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max_new_tokens,
                eos_token_id=stops,
                pad_token_id=pad_id,
            )
            for row in out[:, len(prompt_ids) :].tolist():
                lengths.append(next((i for i, t in enumerate(row) if t in stops), len(row)))
    return lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--plain-batch", type=int, default=16, help="prompt copies per `generate` call")
    parser.add_argument("--batch-size", type=int, default=1000, help="answers per decode batch of the engine")
    parser.add_argument("--prompt", type=int, default=0, help="index of the training prompt")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each side (the median is reported)")
    args = parser.parse_args()

    with loaded_model(args, "bf16") as loaded:
        model, tokenizer, stops, device = loaded.model, loaded.tokenizer, loaded.stops, loaded.device
        prompt_ids = chat_prompt_ids(tokenizer, prompts("train")[args.prompt].prompt, CHAT)

        def plain(repeat: int) -> list[int]:
            return plain_generate(
                model, prompt_ids, args.answers, args.plain_batch, args.max_new_tokens, stops, tokenizer.pad_token_id,
                seed=repeat + 1,
            )  # fmt: skip

        def engine(repeat: int) -> list[int]:
            settings = SamplingSettings(args.answers, args.max_new_tokens, batch_size=args.batch_size)
            return [len(ids) for ids in sample(model, prompt_ids, settings, stops, seed=repeat + 1).token_ids]

        plain_s, plain_lengths = _timed(plain, args.repeats, device)
        engine_s, engine_lengths = _timed(engine, args.repeats, device)

    print(
        json.dumps(
            {
                "benchmark": "sampling",
                "device": loaded.device_name,
                "torch_threads": torch.get_num_threads(),
                "model": loaded.name,
                "prompt_tokens": len(prompt_ids),
                "answers": args.answers,
                "repeats": args.repeats,
                "max_new_tokens": args.max_new_tokens,
                "plain_batch": args.plain_batch,
                "plain_generate_calls": math.ceil(args.answers / args.plain_batch),
                "engine_batch_size": args.batch_size,
                "plain_seconds": round(plain_s, 3),
                "engine_seconds": round(engine_s, 3),
                "plain_answers_per_s": round(args.answers / plain_s, 1),
                "engine_answers_per_s": round(args.answers / engine_s, 1),
                "engine_over_plain": round(plain_s / engine_s, 2),
                "plain_mean_answer_tokens": round(statistics.mean(plain_lengths), 2),
                "engine_mean_answer_tokens": round(statistics.mean(engine_lengths), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
