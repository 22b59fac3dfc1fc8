"""GPU check: LoRA steps, the sampling engine, the exact pass and CUDA against the CPU, on the paper's model shapes.

    make gpu-check          # = python benchmarks/gpu_check.py --out results/gpu_check
    python benchmarks/gpu_check.py [--models qwen3_0p6b qwen3_8b ...] [--budget-s 240] [--tiny] [--layers N]

With a CUDA device (mode `cuda`), each model is built from its checkpoint's published config.json
(reference/checkpoints/) with random weights, directly on the GPU in bf16, as the paper's jobs load them; no
weights are read. Without one (mode `cpu-tiny`) the same code runs on the CPU in
float32, every model cut to one layer and toy widths (`--tiny`, `TINY_TEXT`) with the demo's 512-token tokenizer
for its vocabulary: the figures then check the script, not a GPU. First, once:

- consistency: a small Qwen3-shaped model (`COMPARE_SHAPE`, random weights from a fixed seed, built on the CPU in
  float32 and copied, so every copy holds the same weights) in float32 and in bf16 on each device. The logits of
  a batch of prompts are compared within `TOLERANCE` of their dtype, and the sampling engine's answers under the
  same seed are compared as the fraction that are identical, which is reported, not asserted: the engine draws
  with a `torch.Generator` on the model's device, whose stream for a seed differs between CUDA and the CPU, and
  even on one device inverse-CDF draws over a large vocabulary flip where bf16 moves the cumulative sums.
  The engine's own promise, the same answers from the same seed on one device, is checked by running it twice.
  In `cpu-tiny` mode, CPU float32 is compared with CPU bf16 instead.

Then for each model, smallest first, until `--budget-s` seconds have passed (later ones are skipped):

- sampling: `calibft.lm.generation.sample` draws `--answers` answers to one training prompt in decode batches
  of the structured evaluation's `batch_size` (config.yaml), against `model.generate` on the prompt repeated
  `--plain-batch` times (the authors' way), `--plain-answers` answers; answers per second of each, and the
  peak GPU memory of the engine's run. Random weights rarely stop early, so answers run to
  `--max-new-tokens`: the most a real model's sampling costs.
- exact: the exact structured evaluation's pass (`calibft.lm.trie_walk.value_probabilities` with the sampling settings
  and stop ids in force, as `calibft.evals.exact_structured.run` calls it) over `--exact-space` for
  `--exact-prompts` prompts of the evaluation's first split; seconds per prompt, tokens forwarded, peak memory
  and each prompt's total probability on the space (at most 1).
- training: LoRA as config.yaml's `training.lora`, AdamW on the adapter, `training.per_device_batch_size`
  prompts per step; soft (trie KL over the training spaces of `output_spaces.soft`) and hard (completion
  cross-entropy) steps in bf16 autocast as Accelerate runs them; median milliseconds of `--steps` steps after
  two warm-ups, and the peak GPU memory of each objective. One process: the paper shards training over 4 GPUs
  with FSDP, which this check does not (a rank then holds a quarter of the weights).

At full size, token ids come from the Qwen3 tokenizer (the packaged one) for every model, and every model ends an
answer with its EOS: the cost is set by the shapes, not by which ids are fed. A part that runs out of GPU memory
is recorded as such and the next one runs. Each model's measured peaks are set against what `calibft.pipeline.memory`
estimates for the same batches on the meta device (`estimated_peak_gb`: tensors only, as
`torch.cuda.max_memory_allocated` counts them), the check of docs/cluster.md's memory table. Prints one JSON line
per stage; writes
`gpu_check.json` (everything) and `gpu_check.md` (the tables for docs/gpu.md) into `--out`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import accelerate
import peft
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, Gemma3ForConditionalGeneration, PretrainedConfig

from benchmarks.sampling import plain_generate
from calibft.core.io import atomic_path, write_json
from calibft.data.grid import evenly_spaced, prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, trie_set_for_spaces
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.generation import SamplingSettings, sample, stop_token_ids
from calibft.lm.meta_models import as_loaded, checkpoint_config
from calibft.lm.models import attach_lora
from calibft.lm.packaged_tokenizers import load_packaged_tokenizer
from calibft.lm.trie_walk import NextToken, forwarded_tokens, value_probabilities
from calibft.pipeline import memory
from calibft.pipeline.config import read_config
from calibft.training.largest_batch import TrainingInputs
from calibft.training.objectives import hard_batch_loss, soft_batch_loss

CONFIG = read_config(Path(__file__).resolve().parents[1] / "config.yaml")
CPU_TINY_NOTE = "cpu-tiny: no CUDA device; the figures check the script, not a GPU"

# The full-size models, smallest first: each from its checkpoint's published config.json (reference/checkpoints/);
# Qwen3-14B is the largest whose LoRA training fits one 80 GB GPU without FSDP
MODELS = ("qwen3_0p6b", "gemma3_4b_it", "qwen3_8b", "qwen3_14b")


def checkpoint(name: str) -> dict:
    return checkpoint_config(name, CONFIG["models"][name]["hf_id"])


# --tiny: toy widths for every text stack (Gemma-3's attention scale follows its head size) and its vision tower
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
TINY_HEAD_DIM = 16
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
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
# Defaults that differ between the full-size check and --tiny: the full one is sized so that setup, the
# consistency check and the four models (from docs/gpu.md's H200 run) end well inside 8 minutes on an H100.
DEFAULTS = {
    "full": {
        "answers": 1000,
        "plain_answers": 160,
        "max_new_tokens": 32,
        "steps": 3,
        "prompts": 16,
        "exact_prompts": 2,
        "exact_space": "eval",
        "compare_answers": 100,
    },
    "tiny": {
        "answers": 100,
        "plain_answers": 16,
        "max_new_tokens": 8,
        "steps": 1,
        "prompts": 8,
        "exact_prompts": 1,
        # d=2: the demo tokenizer's trie of the first unseen prompt has 786 internal nodes, against 40,542 in the
        # evaluation space (d=5, 16,384 bins): the CPU walks it in a fraction of a second
        "exact_space": "d2_b1001",
        "compare_answers": 100,
    },
}


@dataclass
class ExactInputs:
    """The prompts of the exact pass, their ids and their tries of one output space."""

    space: str  # the output_spaces entry of config.yaml
    split: str
    prompt_ids: list[list[int]]
    tries: TrieSet

    @classmethod
    def build(cls, tokenizer, options: ChatOptions, space_name: str, count: int) -> ExactInputs:
        """`count` prompts evenly spaced over the structured evaluation's first split, with their tries of the
        output space `space_name`."""
        space, split = CONFIG["output_spaces"][space_name], CONFIG["evaluation"]["structured"]["splits"][0]
        chosen = evenly_spaced(prompts(split), count)
        spaces = SpaceSet.from_spaces(
            [p.id for p in chosen], spaces_for_prompts(chosen, space["decimals"], space["max_bins"])
        )
        ids = [chat_prompt_ids(tokenizer, p.prompt, options) for p in chosen]
        return cls(space_name, split, ids, trie_set_for_spaces(tokenizer, spaces))


def model_config(shape: dict, tokenizer, layers: int | None, tiny: bool) -> PretrainedConfig:
    """The configuration of `shape`, ending answers with the tokenizer's EOS; `tiny`: toy widths and the
    tokenizer's vocabulary; `layers`: that many decoder layers (and vision layers)."""
    shape = as_loaded(shape)
    model_type = shape.pop("model_type")
    text = shape.get("text_config", shape)
    text.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if tiny:
        text.update(TINY_TEXT, vocab_size=len(tokenizer), head_dim=TINY_HEAD_DIM)
        if "query_pre_attn_scalar" in text:
            text["query_pre_attn_scalar"] = TINY_HEAD_DIM
        if "vision_config" in shape:
            shape["vision_config"].update(TINY_VISION)
    if layers is not None:
        text["num_hidden_layers"] = layers
        if "vision_config" in shape:
            shape["vision_config"]["num_hidden_layers"] = layers
    return AutoConfig.for_model(model_type, **shape)


def build(config: PretrainedConfig, device: torch.device, dtype: torch.dtype):
    """A randomly initialized model of `config` on `device` (Gemma-3 with its vision tower, as loaded)."""
    with torch.device(device):
        if config.model_type == "gemma3":
            return Gemma3ForConditionalGeneration._from_config(config, dtype=dtype)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_gb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 1e9, 2) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _engine_settings(answers: int, max_new_tokens: int) -> SamplingSettings:
    """The structured evaluation's sampling settings, for `answers` answers of at most `max_new_tokens`."""
    sampling = CONFIG["evaluation"]["structured"]["sampling"]
    return SamplingSettings(
        answers, max_new_tokens, sampling["temperature"], sampling["top_p"], batch_size=sampling["batch_size"]
    )


def sampling_figures(model, prompt_ids, stops, pad_id, args, device) -> dict:
    """Answers per second of the engine and of plain `generate`, and the engine's peak memory."""
    settings = _engine_settings(args.answers, args.max_new_tokens)
    warm_up = _engine_settings(min(settings.batch_size, args.answers), args.max_new_tokens)
    sample(model, prompt_ids, warm_up, stops, seed=0)  # one full decode batch: the timed run pays no first allocations
    _reset_peak(device)
    _synchronize(device)
    start = time.perf_counter()
    lengths = [len(ids) for ids in sample(model, prompt_ids, settings, stops, seed=1).token_ids]
    _synchronize(device)
    engine_s = time.perf_counter() - start
    engine_peak = _peak_gb(device)

    start = time.perf_counter()
    plain_generate(model, prompt_ids, args.plain_answers, args.plain_batch, args.max_new_tokens, stops, pad_id, seed=1)
    _synchronize(device)
    plain_s = time.perf_counter() - start
    return {
        "engine_batch_size": settings.batch_size,
        "engine_answers_per_s": round(args.answers / engine_s, 1),
        "engine_mean_answer_tokens": round(statistics.mean(lengths), 1),
        "engine_peak_gb": engine_peak,
        "plain_answers_per_s": round(args.plain_answers / plain_s, 1),
        "engine_over_plain": round(plain_s / args.plain_answers * args.answers / engine_s, 2),
    }


def exact_figures(model, inputs: ExactInputs, stops, device) -> dict:
    """Seconds per prompt of the exact pass, tokens it forwards, its peak memory and each prompt's probability
    on the space."""
    sampling = CONFIG["evaluation"]["structured"]["sampling"]
    batch_nodes = CONFIG["evaluation"]["exact"]["batch_nodes"]
    next_token = NextToken(sampling["temperature"], sampling["top_p"], tuple(stops))  # as exact_structured.run
    _reset_peak(device)
    seconds, sums, tokens = [], [], []
    for i, ids in enumerate(inputs.prompt_ids):
        trie = inputs.tries.trie(i)
        _synchronize(device)
        start = time.perf_counter()
        probs, _ = value_probabilities(model, ids, trie, batch_nodes, next_token)
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
        sums.append(float(probs.sum()))
        tokens.append(forwarded_tokens(len(ids), trie, batch_nodes))
    return {
        "space": space_label(inputs.space),
        "split": inputs.split,
        "prompts": len(seconds),
        "values_per_prompt": round(float(np.diff(inputs.tries.value_offsets).mean()), 1),
        "trie_nodes_per_prompt": round(float(np.diff(inputs.tries.node_offsets).mean()), 1),
        "forwarded_tokens_per_prompt": round(statistics.mean(tokens), 1),
        "batch_nodes": batch_nodes,
        "seconds": [round(s, 3) for s in seconds],
        "seconds_per_prompt": round(statistics.mean(seconds), 3),
        "probability_on_space": sums,
        "peak_gb": _peak_gb(device),
    }


def training_figures(model, data, args, device) -> dict:
    """Median ms per soft and hard LoRA step, each objective's peak memory and whether its losses were finite."""
    tokenizer, spaces, tries, prompt_ids = data
    training = CONFIG["training"]
    batch, max_len = training["per_device_batch_size"], training["max_seq_len"]
    model = attach_lora(model, training["lora"])
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    pad = tokenizer.pad_token_id

    def items(i: int) -> np.ndarray:
        return (np.arange(batch) + i * batch) % len(prompt_ids)

    def values(data, i: int) -> np.ndarray:
        return data.sample_values(items(i), np.random.default_rng(i))

    objectives = {
        "soft": lambda i: soft_batch_loss(
            model, tries, items(i), prompt_ids, pad, values(tries, i), max_len=max_len, numerics="logits_dtype"
        ),
        "hard": lambda i: hard_batch_loss(
            model,
            spaces,
            items(i),
            prompt_ids,
            pad,
            values(spaces, i),
            tokenizer,
            max_len=max_len,
            numerics="logits_dtype",
        ),
    }
    figures = {
        "per_device_batch_size": batch,
        "trainable_parameters": sum(p.numel() for p in optimizer.param_groups[0]["params"]),
    }
    for name, objective in objectives.items():
        _reset_peak(device)
        times, losses = [], []
        for i in range(args.steps + 2):
            _synchronize(device)
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss, _ = objective(i)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _synchronize(device)
            losses.append(float(loss.detach()))
            if i >= 2:
                times.append(1000 * (time.perf_counter() - start))
        figures[f"{name}_ms_per_step"] = round(statistics.median(times), 1)
        figures[f"{name}_peak_gb"] = _peak_gb(device)
        figures[f"{name}_losses"] = [round(x, 4) for x in losses]
        figures[f"{name}_losses_finite"] = bool(np.isfinite(losses).all())
    return figures


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
    settings = _engine_settings(args.compare_answers, COMPARE_NEW_TOKENS)
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


def estimated_peaks(config: PretrainedConfig, data, exact_inputs: ExactInputs, args) -> dict:
    """GB of tensors that `calibft.pipeline.memory` estimates for this check's own batches on one GPU (the weights, the
    batch's peak on the meta device and, in training, the LoRA gradients and AdamW's two states; no allowance),
    to set against the measured peaks (`torch.cuda.max_memory_allocated`)."""
    tokenizer, spaces, tries, prompt_ids = data
    training = CONFIG["training"]
    batches = {
        "engine_peak_gb": memory.Batch(
            "sampling",
            "decode",
            min(args.answers, _engine_settings(args.answers, 1).batch_size),
            len(prompt_ids[0]),
            args.max_new_tokens,
        ),
        "exact_peak_gb": memory.Batch(
            "exact",
            "exact",
            CONFIG["evaluation"]["exact"]["batch_nodes"],
            max(map(len, exact_inputs.prompt_ids)),
            levels=int(exact_inputs.tries.value_length.max()),
        ),
        "soft_peak_gb": memory.Batch("soft", "train_soft", training["per_device_batch_size"], training["max_seq_len"]),
        "hard_peak_gb": memory.Batch("hard", "train_hard", training["per_device_batch_size"], training["max_seq_len"]),
    }
    inputs = TrainingInputs(tokenizer, spaces, tries, prompt_ids)
    measured = memory.measure(config.to_dict(), list(batches.values()), training["lora"], inputs)
    return {
        key: (measured.weights + measured.peaks[batch] + 3 * measured.lora * batch.training) / 1e9
        for key, batch in batches.items()
    }


def _unless_out_of_memory(measure, *args) -> dict:
    """`measure(*args)`, or where it runs out of GPU memory, what the error says (the next part still runs)."""
    try:
        return measure(*args)
    except torch.OutOfMemoryError as error:
        torch.cuda.empty_cache()
        return {"out_of_memory": str(error).splitlines()[0]}


def measure_model(name: str, config: PretrainedConfig, device, dtype, data, exact_inputs, args) -> dict:
    """One model's figures: sampling, the exact pass and training."""
    tokenizer, prompt_ids = data[0], data[3]
    start = time.perf_counter()
    torch.manual_seed(0)
    model = build(config, device, dtype).eval()
    line = {
        "model": name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "build_s": round(time.perf_counter() - start, 1),
    }
    stops = stop_token_ids(model, tokenizer)
    line["sampling"] = _unless_out_of_memory(
        sampling_figures, model, prompt_ids[0], stops, tokenizer.pad_token_id, args, device
    )
    line["exact"] = _unless_out_of_memory(exact_figures, model, exact_inputs, stops, device)
    line["training"] = _unless_out_of_memory(training_figures, model, data, args, device)  # last: adds LoRA
    line["seconds"] = round(time.perf_counter() - start, 1)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return line


def space_label(name: str) -> str:
    """An output space of config.yaml by name and size, e.g. `eval (d=5, 16384 bins)`."""
    space = CONFIG["output_spaces"][name]
    return f"{name} (d={space['decimals']}, {space['max_bins']} bins)"


def _amount(value: float, units: tuple[str, str]) -> str:
    """`value` in billions (`units[0]`) from 0.1 billion up, in millions (`units[1]`) below."""
    return f"{value / 1e9:.2f} {units[0]}" if value >= 1e8 else f"{value / 1e6:.2f} {units[1]}"


def _cell(figures: dict, key: str, unit: str = "", digits: int = 1) -> str:
    """A table cell: the figure with its unit, `OOM` where the part ran out of memory, `-` where it is missing."""
    if "out_of_memory" in figures:
        return "OOM"
    value = figures.get(key)
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def markdown(report: dict) -> str:
    """The summary tables of a report, for docs/gpu.md."""
    settings, sampling = report["settings"], CONFIG["evaluation"]["structured"]["sampling"]
    lines = [
        f"`benchmarks/gpu_check.py`, mode `{report['mode']}`, {report['date']}: {report['device']}, torch "
        f"{report['torch']}, transformers {report['transformers']}, peft {report['peft']}, accelerate "
        f"{report['accelerate']}; {report['dtype']}, layers {report['layers'] or 'all'}, tiny {report['tiny']}, "
        f"{report['seconds']} s in all.",
        "",
    ]
    if "note" in report:
        lines += [f"**{report['note']}**", ""]
    lines += [
        f"Sampling: {settings['answers']} answers of at most {settings['max_new_tokens']} tokens to one training "
        f"prompt, decode batches of {sampling['batch_size']}, against `generate` on {settings['plain_batch']} copies "
        f"of the prompt per call ({settings['plain_answers']} answers). Exact pass: the `{report['exact_space']}` "
        f"space, {settings['exact_prompts']} prompt(s), batch_nodes {CONFIG['evaluation']['exact']['batch_nodes']}. "
        f"Training: one process, median of {settings['steps']} step(s) after 2 warm-ups. Peaks are "
        "`torch.cuda.max_memory_allocated` (none on the CPU).",
        "",
        "| model | parameters | weights | engine answers/s | `generate` answers/s | engine peak | exact s/prompt "
        "| exact peak | soft step | soft peak | hard step | hard peak |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in report["models"]:
        if "skipped" in m:
            lines.append(f"| {m['model']} | skipped {m['skipped']} |" + " |" * 10)
            continue
        sampling, exact, training = m["sampling"], m["exact"], m["training"]
        lines.append(
            f"| {m['model']} | {_amount(m['parameters'], ('B', 'M'))} | {_amount(m['weights_bytes'], ('GB', 'MB'))} "
            f"| {_cell(sampling, 'engine_answers_per_s')} | {_cell(sampling, 'plain_answers_per_s')} "
            f"| {_cell(sampling, 'engine_peak_gb', ' GB')} | {_cell(exact, 'seconds_per_prompt', ' s', 3)} "
            f"| {_cell(exact, 'peak_gb', ' GB')} | {_cell(training, 'soft_ms_per_step', ' ms')} "
            f"| {_cell(training, 'soft_peak_gb', ' GB')} | {_cell(training, 'hard_ms_per_step', ' ms')} "
            f"| {_cell(training, 'hard_peak_gb', ' GB')} |"
        )
    parts = (("engine", "sampling", "engine_peak_gb"), ("exact", "exact", "peak_gb"))
    parts += (("soft", "training", "soft_peak_gb"), ("hard", "training", "hard_peak_gb"))
    lines += [
        "",
        "Peak memory measured against `calibft.pipeline.memory`'s estimate of the same batches on the meta device "
        "(tensors only, weights included):",
        "",
        "| model | " + " | ".join(f"{name}: measured / estimated" for name, _, _ in parts) + " |",
        "| --- |" + " ---: |" * len(parts),
    ]
    for m in report["models"]:
        if "skipped" not in m:
            estimated = m["estimated_peak_gb"]
            cells = [
                f"{_cell(m[part], key, ' GB')} / {estimated[f'{name}_peak_gb']:.2f} GB" for name, part, key in parts
            ]
            lines.append(f"| {m['model']} | " + " | ".join(cells) + " |")
    consistency = report["consistency"]
    lines += [
        "",
        f"Consistency, {consistency['compared']}: logits of {consistency['positions']} prompt positions, "
        f"{consistency['answers']} answers of the engine under one seed. The engine draws with a `torch.Generator` "
        "on the model's device, so answers agree across devices only by chance; on one device, where the two "
        "dtypes' probabilities agree. The same seed twice on one device must give the same answers.",
        "",
        "| tested | against | logits rel. RMS difference | tolerance | within | top-1 agreement "
        "| identical answers | identical first tokens | same seed twice (tested) |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in consistency["comparisons"]:
        lines.append(
            f"| {c['tested']} | {c['against']} | {c['logits_relative_rms_difference']:.2e} | {c['tolerance']:.2e} "
            f"| {'yes' if c['within_tolerance'] else 'NO'} | {c['top1_agreement']:.3f} | {c['identical_answers']:.2f} "
            f"| {c['identical_first_tokens']:.2f} | {c['repeat_identical_answers']:.2f} |"
        )
    reasons = {c["tolerance"]: c["tolerance_reason"] for c in consistency["comparisons"]}
    lines += [""] + [f"- tolerance {tolerance:.2e}: {reason}." for tolerance, reason in reasons.items()]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: Path) -> None:
    """gpu_check.json and gpu_check.md in `out`, each written to a temporary file there and renamed onto its name."""
    write_json(out / "gpu_check.json", report)
    with atomic_path(out / "gpu_check.md") as tmp:
        tmp.write_text(markdown(report))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(CONFIG["models"]))
    parser.add_argument("--budget-s", type=float, default=240.0, help="no model is started after this many seconds")
    parser.add_argument("--tiny", action="store_true", help="toy widths and vocabulary (always without CUDA)")
    parser.add_argument("--layers", type=int, default=None, help="cut every model to this many layers (1 without CUDA)")
    parser.add_argument("--out", type=Path, default=Path("results/gpu_check"))
    parser.add_argument("--plain-batch", type=int, default=16)
    # None: DEFAULTS of the full-size or the tiny check
    parser.add_argument("--answers", type=int)
    parser.add_argument("--plain-answers", type=int)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--prompts", type=int, help="training prompts whose spaces and tries are built")
    parser.add_argument("--exact-prompts", type=int, help="evaluation prompts of the exact pass")
    parser.add_argument("--exact-space", choices=list(CONFIG["output_spaces"]), help="output space of the exact pass")
    parser.add_argument("--compare-answers", type=int, help="answers of the consistency check's engine runs")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    began = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:  # the CPU runs the script at toy sizes only
        args.tiny = True
        args.layers = 1 if args.layers is None else args.layers
        # toy models gain nothing from more threads, and on a busy machine every parallel region waits for its
        # slowest thread (50 times slower steps beside one busy process on 2 cores)
        torch.set_num_threads(1)
    for key, value in DEFAULTS["tiny" if args.tiny else "full"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    mode = "cuda" if cuda else "cpu-tiny"
    dtype = torch.bfloat16 if cuda else torch.float32
    if not cuda:
        print(CPU_TINY_NOTE, flush=True)

    if args.tiny:  # a 512-token byte-level BPE with Qwen3's special tokens and chat template
        from calibft.demo.tiny_model import TinyModelSettings, train_tokenizer, training_chats

        settings = TinyModelSettings()
        tokenizer = train_tokenizer(training_chats(), settings.vocab_size, settings.max_position_embeddings)
    else:
        tokenizer = load_packaged_tokenizer("qwen3")
    options = ChatOptions.from_config(CONFIG["models"]["qwen3_8b"]["chat"])
    space = CONFIG["output_spaces"]["soft"]
    train = prompts("train")
    chosen = train[:: max(1, len(train) // args.prompts)][: args.prompts]
    spaces = SpaceSet.from_spaces(
        [p.id for p in chosen], spaces_for_prompts(chosen, space["decimals"], space["max_bins"])
    )
    prompt_ids = [chat_prompt_ids(tokenizer, p.prompt, options) for p in chosen]
    data = (tokenizer, spaces, trie_set_for_spaces(tokenizer, spaces), prompt_ids)
    exact_inputs = ExactInputs.build(tokenizer, options, args.exact_space, args.exact_prompts)
    setup = {"setup_s": round(time.perf_counter() - began, 1), "space": space, "prompts": len(chosen)}
    print(json.dumps(setup), flush=True)

    start = time.perf_counter()
    consistency = consistency_figures(tokenizer, prompt_ids, cuda, args)
    consistency["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps({"consistency": consistency}), flush=True)

    models = []
    for name in args.models:
        if time.perf_counter() - began > args.budget_s:
            line = {"model": name, "skipped": f"after {args.budget_s:.0f} s"}
        else:
            config = model_config(checkpoint(name), tokenizer, args.layers, args.tiny)
            line = measure_model(name, config, device, dtype, data, exact_inputs, args)
            line["estimated_peak_gb"] = estimated_peaks(config, data, exact_inputs, args)
        print(json.dumps(line), flush=True)
        models.append(line)

    report = {
        "benchmark": "gpu_check",
        "mode": mode,
        **({} if cuda else {"note": CPU_TINY_NOTE}),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "accelerate": accelerate.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "tiny": args.tiny,
        "layers": args.layers,
        "torch_threads": torch.get_num_threads(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "setup": setup,
        "exact_space": space_label(args.exact_space),
        "consistency": consistency,
        "models": models,
        "seconds": round(time.perf_counter() - began, 1),
    }
    write_report(report, args.out)
    keys = ("benchmark", "mode", "note", "device", "torch", "transformers", "layers", "seconds")
    summary = {k: report[k] for k in keys if k in report}
    print(json.dumps({**summary, "models": [m["model"] for m in models if "skipped" not in m], "out": str(args.out)}))
    return report


if __name__ == "__main__":
    main()
