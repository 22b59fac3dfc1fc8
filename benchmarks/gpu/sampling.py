"""The GPU check's sampling figures: the sampling engine against plain `model.generate` on one training prompt."""

from __future__ import annotations

import statistics

from benchmarks.gpu.peaks import peak_gb, reset_peak
from benchmarks.gpu.settings import engine_settings
from benchmarks.sampling import plain_generate
from benchmarks.tiny_model import timed
from calibft.lm.generation import sample


def sampling_figures(model, prompt_ids, stops, pad_id, args, device) -> dict:
    """Answers per second of the engine and of plain `generate`, and the engine's peak memory."""
    settings = engine_settings(args.answers, args.max_new_tokens)
    warm_up = engine_settings(min(settings.batch_size, args.answers), args.max_new_tokens)
    sample(model, prompt_ids, warm_up, stops, seed=0)  # one full decode batch: the timed run pays no first allocations
    reset_peak(device)
    engine_s, drawn = timed(device, lambda: sample(model, prompt_ids, settings, stops, seed=1))
    lengths = [len(ids) for ids in drawn.token_ids]
    engine_peak = peak_gb(device)

    plain_s, _ = timed(
        device,
        lambda: plain_generate(
            model, prompt_ids, args.plain_answers, args.plain_batch, args.max_new_tokens, stops, pad_id, seed=1
        ),
    )
    return {
        "engine_batch_size": settings.batch_size,
        "engine_answers_per_s": round(args.answers / engine_s, 1),
        "engine_mean_answer_tokens": round(statistics.mean(lengths), 1),
        "engine_peak_gb": engine_peak,
        "plain_answers_per_s": round(args.plain_answers / plain_s, 1),
        "engine_over_plain": round(plain_s / args.plain_answers * args.answers / engine_s, 2),
    }
