"""GPU check: LoRA steps, the sampling engine, the exact pass and CUDA against the CPU, on the paper's model shapes.

    make gpu-check          # = python benchmarks/gpu_check.py --out results/gpu_check
    python benchmarks/gpu_check.py [--models qwen3_0p6b qwen3_8b ...] [--budget-s 240] [--tiny] [--layers N]

This script is the command line: it sets up the prompts, runs the parts below and writes the report. Each part is a
module of benchmarks/gpu/ (consistency, sampling, exact, training, peaks; the models in models, the report's
tables in report).

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
  and stop ids in force, as `calibft.evals.exact.runner.run` calls it) over `--exact-space` for
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
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import accelerate
import peft
import transformers
from transformers import PretrainedConfig

from benchmarks.gpu.consistency import consistency_figures
from benchmarks.gpu.exact import ExactInputs, exact_figures, space_label
from benchmarks.gpu.models import MODELS, build, checkpoint, model_config
from benchmarks.gpu.peaks import estimated_peaks
from benchmarks.gpu.report import write_report
from benchmarks.gpu.sampling import sampling_figures
from benchmarks.gpu.settings import CONFIG
from benchmarks.gpu.training import training_figures
from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import trie_set_for_spaces
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.generation import stop_token_ids
from calibft.lm.packaged_tokenizers import load_packaged_tokenizer

CPU_TINY_NOTE = "cpu-tiny: no CUDA device; the figures check the script, not a GPU"
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
