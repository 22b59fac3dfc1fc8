"""The GPU check's consistency figures: the logits and sampled answers of one small model, CUDA against the CPU
(or, without CUDA, CPU bf16 against CPU float32)."""

from __future__ import annotations

import copy

import torch

from benchmarks.gpu.models import build, checkpoint, model_config
from benchmarks.gpu.settings import engine_settings
from calibft.lm.generation import sample, stop_token_ids

# The consistency check's model: Qwen3-0.6B's architecture cut to 2 layers of width 128, small enough for the CPU
COMPARE_SHAPE = {
    **checkpoint("qwen3_0p6b"),
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}
COMPARE_PROMPTS = 4  # training prompts in the batch whose logits are compared
# tokens per answer of its engine runs: the CPU's draw over Qwen3's 151,669 ids at full size, 8 keep it to seconds
COMPARE_NEW_TOKENS = 8
# Largest relative RMS difference of two runs' logits, by the coarser dtype of the two, and why. (TF32 matmuls,
# a `torch.get_float32_matmul_precision()` other than "highest", would break the float32 one: the JSON says which.)
TOLERANCE = {
    "float32": (
        1e-4,
        "float32 keeps 24 significant bits (unit roundoff 2^-24 = 6e-8): two devices differ only in the order of "
        "their sums, which moves the logits by far less than 1e-4",
    ),
    "bfloat16": (
        16 * 2.0**-8,
        "bf16 keeps 8 significant bits (unit roundoff 2^-8 = 0.4%): every weight and activation it stores is off "
        "by up to that, and layers add such errors up (0.75% over 2 layers against float32 on the CPU); 16 units "
        "leave room for the errors of both sides of a comparison",
    ),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _padded_batch(prompt_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and their attention mask."""
    width = max(map(len, prompt_ids))
    ids = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompt_ids):
        ids[row, : len(prompt)] = torch.tensor(prompt)
        mask[row, : len(prompt)] = 1
    return ids, mask


def _run_copy(reference, run: tuple[str, str], ids, mask, prompt_ids, stops, repeat: bool, args) -> dict:
    """The float32 logits of the batch's prompt positions and the engine's answers (seed 0; with `repeat`, a
    second time) of a copy of `reference` on the device and in the dtype of `run`."""
    device, dtype = run
    model = copy.deepcopy(reference).to(device=device, dtype=DTYPES[dtype]).eval()
    settings = engine_settings(args.compare_answers, COMPARE_NEW_TOKENS)
    with torch.inference_mode():
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    figures = {"logits": logits.float().cpu()[mask.bool()]}
    for key in ("answers", "repeat") if repeat else ("answers",):
        figures[key] = sample(model, prompt_ids, settings, stops, seed=0).token_ids
    return figures


def _identical(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def consistency_figures(tokenizer, prompt_ids: list[list[int]], cuda: bool, args) -> dict:
    """Logits and samples of the comparison model: CUDA against the CPU in float32 and in bf16, or without CUDA
    CPU bf16 against CPU float32 (the first of each pair is the run under test)."""
    torch.manual_seed(0)
    config = model_config({**COMPARE_SHAPE, "vocab_size": len(tokenizer)}, tokenizer, layers=None, tiny=False)
    reference = build(config, torch.device("cpu"), torch.float32)  # every copy is made from these weights
    stops = stop_token_ids(reference, tokenizer)
    if cuda:  # each dtype across devices, and the GPU's bf16 against the CPU's float32 (how the tests compute)
        pairs = [
            (("cuda", "float32"), ("cpu", "float32")),
            (("cuda", "bfloat16"), ("cpu", "bfloat16")),
            (("cuda", "bfloat16"), ("cpu", "float32")),
        ]
    else:
        pairs = [(("cpu", "bfloat16"), ("cpu", "float32"))]
    ids, mask = _padded_batch(prompt_ids[:COMPARE_PROMPTS])
    tested_runs = [tested for tested, _ in pairs]
    runs = {
        run: _run_copy(reference, run, ids, mask, prompt_ids[0], stops, run in tested_runs, args)
        for run in dict.fromkeys(run for pair in pairs for run in pair)
    }
    comparisons = []
    for tested, base in pairs:
        a, b = runs[tested], runs[base]
        difference = a["logits"] - b["logits"]
        tolerance, reason = TOLERANCE["bfloat16" if "bfloat16" in (tested[1], base[1]) else "float32"]
        relative = float(difference.norm() / b["logits"].norm())
        comparisons.append(
            {
                "tested": f"{tested[0]} {tested[1]}",
                "against": f"{base[0]} {base[1]}",
                "logits_relative_rms_difference": relative,
                "logits_max_abs_difference": float(difference.abs().max()),
                "logits_rms": float(b["logits"].pow(2).mean().sqrt()),
                "tolerance": tolerance,
                "tolerance_reason": reason,
                "within_tolerance": relative <= tolerance,
                "top1_agreement": float((a["logits"].argmax(-1) == b["logits"].argmax(-1)).float().mean()),
                "same_generator": tested[0] == base[0],
                "identical_answers": _identical(a["answers"], b["answers"]),
                "identical_first_tokens": _identical([x[:1] for x in a["answers"]], [x[:1] for x in b["answers"]]),
                "repeat_identical_answers": _identical(a["answers"], a["repeat"]),
            }
        )
    return {
        "compared": "CUDA against the CPU" if cuda else "CPU bf16 against CPU float32 (no CUDA device)",
        "model": {k: config.to_dict()[k] for k in ("num_hidden_layers", "hidden_size", "vocab_size")},
        "positions": int(mask.sum()),
        "answers": args.compare_answers,
        "max_new_tokens": COMPARE_NEW_TOKENS,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "comparisons": comparisons,
    }
