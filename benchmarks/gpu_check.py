"""GPU check at full size: soft and hard LoRA steps and the sampling engine on the paper's model shapes, in bf16.

    python benchmarks/gpu_check.py [--models qwen3_0_6b qwen3_8b ...] [--budget-s 240] [--layers N]

Each model is built from its published configuration (`SHAPES`: the checkpoints' config.json values that set
the cost) with random weights, directly on the GPU in bf16, as the paper's jobs load them; no weights are
read. For each, in this order:

- sampling: `calibft.generation.sample` draws `--answers` answers to one training prompt in decode batches
  of the structured evaluation's `batch_size` (config.yaml), against `model.generate` on the prompt repeated
  `--plain-batch` times (the authors' way), `--plain-answers` answers; answers per second of each, and the
  peak GPU memory of the engine's run. Random weights rarely stop early, so answers run to
  `--max-new-tokens`: the most a real model's sampling costs.
- training: LoRA as config.yaml's `training.lora`, AdamW on the adapter, `training.per_device_batch_size`
  prompts per step; soft (trie KL over the training spaces of `output_spaces.soft`) and hard (completion cross-entropy)
  steps in bf16 autocast as Accelerate runs them; median milliseconds of `--steps` steps after two warm-ups,
  and the peak GPU memory of each objective. One process: the paper shards training over 4 GPUs with FSDP,
  which this check does not (a rank then holds a quarter of the weights).

Token ids come from the Qwen3 tokenizer (the packaged one) for every model: the cost is set by the shapes, not
by which ids are fed. Models are run smallest first and skipped once `--budget-s` seconds have passed.
Prints one JSON line per model, then a summary line; `--layers N` cuts every model to N layers (a CPU check
of the script itself).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, Gemma3ForConditionalGeneration

from benchmarks.sampling import plain_generate
from calibft.chat import ChatOptions, chat_prompt_ids
from calibft.generation import SamplingSettings, sample, stop_token_ids
from calibft.grid import prompts
from calibft.models import attach_lora
from calibft.objectives import hard_batch_loss, soft_batch_loss
from calibft.output_space import SpaceSet, spaces_for_prompts
from calibft.packaged_tokenizers import load_packaged_tokenizer
from calibft.trie import trie_set_for_spaces

CONFIG = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())

_QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "head_dim": 128, "num_key_value_heads": 8}
_GEMMA3_VISION = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 896,
    "patch_size": 14,
    "vision_use_head": False,
}
# The values of each checkpoint's config.json that set memory and time (the rest keep transformers' defaults).
SHAPES = {
    "qwen3_0p6b": {
        **_QWEN3,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "gemma3_4b_it": {
        "model_type": "gemma3",
        "text_config": {
            "vocab_size": 262208,
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "num_hidden_layers": 34,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "sliding_window": 1024,
            "query_pre_attn_scalar": 256,
        },
        "vision_config": _GEMMA3_VISION,
    },
    "qwen3_8b": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": False,
    },
    "qwen3_14b": {
        **_QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "tie_word_embeddings": False,
    },
}


def build(shape: dict, layers: int | None, device: torch.device):
    """A randomly initialized bf16 model of `shape` on `device` (Gemma-3 with its vision tower, as loaded)."""
    shape = copy.deepcopy(shape)
    model_type = shape.pop("model_type")
    if layers is not None:
        (shape.get("text_config") or shape)["num_hidden_layers"] = layers
        if "vision_config" in shape:
            shape["vision_config"]["num_hidden_layers"] = layers
    config = AutoConfig.for_model(model_type, **shape)
    with torch.device(device):
        if model_type == "gemma3":
            return Gemma3ForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_gb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 1e9, 2) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def sampling_figures(model, prompt_ids, stops, pad_id, args, device) -> dict:
    """Answers per second of the engine and of plain `generate`, and the engine's peak memory."""
    batch = CONFIG["evaluation"]["structured"]["sampling"]["batch_size"]
    settings = SamplingSettings(args.answers, args.max_new_tokens, batch_size=batch)
    warm_up = min(batch, args.answers)  # one full decode batch: the timed run pays no first allocations
    sample(model, prompt_ids, SamplingSettings(warm_up, args.max_new_tokens, batch_size=batch), stops, seed=0)
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
        "engine_batch_size": batch,
        "engine_answers_per_s": round(args.answers / engine_s, 1),
        "engine_mean_answer_tokens": round(statistics.mean(lengths), 1),
        "engine_peak_gb": engine_peak,
        "plain_answers_per_s": round(args.plain_answers / plain_s, 1),
        "engine_over_plain": round(plain_s / args.plain_answers * args.answers / engine_s, 2),
    }


def training_figures(model, data, args, device) -> dict:
    """Median ms per soft and hard LoRA step and each objective's peak memory."""
    tokenizer, spaces, tries, prompt_ids = data
    training = CONFIG["training"]
    batch, max_len = training["per_device_batch_size"], training["max_seq_len"]
    model = attach_lora(model, training["lora"])
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    pad = tokenizer.pad_token_id

    def items(i: int) -> np.ndarray:
        return (np.arange(batch) + i * batch) % len(prompt_ids)

    objectives = {
        "soft": lambda i: soft_batch_loss(
            model, tries, items(i), prompt_ids, pad, np.random.default_rng(i), max_len=max_len, numerics="logits_dtype"
        ),
        "hard": lambda i: hard_batch_loss(
            model,
            spaces,
            items(i),
            prompt_ids,
            pad,
            np.random.default_rng(i),
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
        figures[f"{name}_losses_finite"] = bool(np.isfinite(losses).all())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--budget-s", type=float, default=240.0, help="no model is started after this many seconds")
    parser.add_argument("--layers", type=int, default=None, help="cut every model to this many layers")
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--plain-answers", type=int, default=160)
    parser.add_argument("--plain-batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16, help="training prompts whose spaces and tries are built")
    args = parser.parse_args()
    began = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)

    tokenizer = load_packaged_tokenizer("qwen3")
    space = CONFIG["output_spaces"]["soft"]
    chosen = prompts("train")[:: max(1, len(prompts("train")) // args.prompts)][: args.prompts]
    spaces = SpaceSet.from_spaces(
        [p.id for p in chosen], spaces_for_prompts(chosen, space["decimals"], space["max_bins"])
    )
    tries = trie_set_for_spaces(tokenizer, spaces)
    options = ChatOptions.from_config(CONFIG["models"]["qwen3_8b"]["chat"])
    prompt_ids = [chat_prompt_ids(tokenizer, p.prompt, options) for p in chosen]
    data = (tokenizer, spaces, tries, prompt_ids)
    print(
        json.dumps({"setup_s": round(time.perf_counter() - began, 1), "space": space, "prompts": len(chosen)}),
        flush=True,
    )

    done = []
    for name in args.models:
        if time.perf_counter() - began > args.budget_s:
            print(json.dumps({"model": name, "skipped": f"after {args.budget_s} s"}), flush=True)
            continue
        start = time.perf_counter()
        model = build(SHAPES[name], args.layers, device)
        model.eval()
        line = {
            "model": name,
            "parameters_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
            "weights_gb": round(sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9, 2),
            "build_s": round(time.perf_counter() - start, 1),
        }
        try:
            stops = stop_token_ids(model, tokenizer)
            line["sampling"] = sampling_figures(model, prompt_ids[0], stops, tokenizer.pad_token_id, args, device)
            line["training"] = training_figures(model, data, args, device)
        except torch.OutOfMemoryError as error:
            line["out_of_memory"] = str(error).splitlines()[0]
        line["seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(line), flush=True)
        done.append(name)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(
        json.dumps(
            {
                "benchmark": "gpu_check",
                "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "layers": args.layers,
                "models": done,
                "seconds": round(time.perf_counter() - began, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
