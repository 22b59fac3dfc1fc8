"""Peak GPU memory of the paper's GPU jobs at full size, without weights and without a GPU.

Each model is built from its checkpoint's published `config.json` (reference/checkpoints/) on torch's meta
device, in bf16 as the jobs load it (`calibft.lm.meta_models`): tensors there have shapes and dtypes but no
storage, so a 27B model costs nothing. Each job's largest step then runs on it, by its runner's own function:
a training step on the batch the objectives build (`calibft.training.largest_batch`: forward, the loss's
log-softmax, backward) and AdamW's step; an evaluation's largest batch (the sampling engine's
`largest_decode_step`, the exact walk's `largest_node_batch`, teacher forcing's `forcing_batch`, TinyBenchmarks'
`largest_loglik_batch`, PALOMA's `largest_window_batch`; NoveltyBench's evaluators' `largest_scoring_step`, in
`scoring_memory`). This module sizes the batches
from the configuration (`gpu_batches`). `PeakTracker` counts the bytes of every tensor off the CPU that the step
creates while it is alive, so its peak is what the step adds to the weights.

What a job needs per GPU (`job_memory`):

- evaluations: the bf16 weights plus the batch's peak; where a job has several GPUs, `device_map="auto"`
  places whole layers on each, and with them their cache and activations, so those are shared, while the
  logits and their float copies (the batch's peak on a model without decoder layers) sit on the last GPU;
- training, FSDP full shard over the job's GPUs (launch/fsdp.yaml): a rank's shard of the weights, of their
  gradients (with `use_orig_params`, a flat parameter that mixes frozen base weights and LoRA ones gets a
  gradient of its full size) and of AdamW's two states of the LoRA weights; the unsharded units it holds at
  once (the root unit, the embeddings and output head that no layer class wraps, for the whole step; two
  layer units, the one computed and the one prefetched, each with its unsharded gradient in backward); and the
  step's activations, which FSDP does not shard;
- on top, `CONTEXT_GB` for the CUDA context, cuBLAS workspaces and NCCL buffers, and `FRAGMENTATION` of the
  tensors for the caching allocator's unusable gaps.

GPT-OSS-20B's checkpoint stores its experts in MXFP4. transformers keeps them quantized only where the
`kernels` package is installed; the pinned environment does not install it, so on an A100 (and on any GPU) the
experts are dequantized to bf16 when loaded, and the estimate is of that bf16 model (about 42 GB). Gemma-3
4B/12B/27B load as their image-text class, SigLIP vision tower included; the tower is counted in the weights.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from calibft.core.repository import REFERENCE
from calibft.lm.meta_models import checkpoint_config, meta_model

if TYPE_CHECKING:
    from calibft.training.largest_batch import TrainingInputs

EVALUATORS = REFERENCE / "evaluators"  # config.json of NoveltyBench's reward model and similarity classifier
EVALUATOR_MODELS = ("reward_model", "classifier")  # keys of evaluation.noveltybench.evaluators
RECORD = REFERENCE / "memory.json"  # the measurements behind docs/cluster.md's table (`calibft memory --record`)
GB = 1e9
# Memory of each GPU model that config.yaml's `gpu_model` may name: the paper's A100-SXM4-80GB
GPU_MEMORY_GB = {"a100": 80.0, "h100": 80.0, "h200": 141.0}
CONTEXT_GB = 2.0  # CUDA context (~0.5 GB), cuBLAS workspaces, NCCL's buffers in training
FRAGMENTATION = 0.10  # of the tensors' peak: blocks the caching allocator holds but cannot reuse
HEADROOM = 0.10  # every job of `all` must leave this share of its GPUs' memory free


@dataclass(frozen=True)
class Batch:
    """What one batch of a GPU job feeds the model: `rows` sequences of `prompt` tokens, `new` tokens generated
    or scored after them, and for the exact walk the trie's depth `levels` (its longest value's tokens)."""

    job: str
    kind: str  # train_soft, train_hard, decode, exact, forcing, loglik, windows
    rows: int
    prompt: int
    new: int = 0
    levels: int = 0

    @property
    def training(self) -> bool:
        return self.kind.startswith("train")


# Longest prompt, in tokens, that each evaluation's batch is sized for, its chat template included. The grid's
# prompts (every split) take at most 80, 77, 57 and 83 tokens under the packaged Qwen3, Gemma-3, Llama-3 and
# GPT-OSS templates (calibft.lm.packaged_tokenizers), which leave out the identity and date lines that the hub's
# Llama-3.2 and GPT-OSS templates add (about 30 tokens). The others are bounds on prompt sets that the workflow
# downloads (MCQ's is 197 tokens before its template; NoveltyBench's WildChat prompts and TinyBenchmarks'
# few-shot items are long).
PROMPT_TOKENS = {
    "structured": 128,
    "ssot": 512,
    "open_ended": 128,
    "mcq": 320,
    "noveltybench": 1024,
    "tinybenchmarks": 2048,
}
REWARD_TEMPLATE_TOKENS = 16  # the reward model's chat template around a prompt and a generation (a bound)


@functools.cache
def _longest_value(decimals: int, max_bins: int, splits: tuple[str, ...]) -> int:
    from calibft.data.grid import prompts
    from calibft.data.output_space import spaces_for_prompts

    chosen = [p for split in splits for p in prompts(split)]
    return max(int(max(map(len, s.values))) for s in spaces_for_prompts(chosen, decimals, max_bins))


def longest_value(space: Mapping, splits: list[str]) -> int:
    """The longest value, in characters, of an output space (`output_spaces` entry) over the prompts of
    `splits`: a bound on its tokens, one per character as Qwen3's and Gemma-3's tokenizers split digits
    (Llama-3's and GPT-OSS's group them, so fewer)."""
    return _longest_value(space["decimals"], space["max_bins"], tuple(splits))


def gpu_batches(config: Mapping) -> list[Batch]:
    """The largest batch of every GPU job kind of the paper's plan, from config.yaml's settings."""
    training, evaluation = config["training"], config["evaluation"]
    structured = evaluation["structured"]
    # a training sequence: a grid prompt, then a value and its end token
    completion = longest_value(config["output_spaces"]["soft"], ["train"]) + 1
    seq_len = min(training["max_seq_len"], PROMPT_TOKENS["structured"] + completion)
    per_device = training["per_device_batch_size"]
    # the exact walk's trie depth: a batch feeds its first node's ancestors too
    levels = longest_value(config["output_spaces"][structured["space"]], structured["splits"])

    def generation(job: str, settings: Mapping) -> Batch:
        sampling = settings["sampling"]
        return Batch(job, "decode", sampling["batch_size"], PROMPT_TOKENS[job], sampling["max_new_tokens"])

    tiny = evaluation["tinybenchmarks"]
    paloma = evaluation["paloma"]
    return [
        Batch("train_soft", "train_soft", per_device, seq_len),
        Batch("train_hard", "train_hard", per_device, seq_len),
        generation("structured", structured),
        # teacher-forced paths of the evaluation's space: a value and its end token
        Batch(
            "structured_logit_kl",
            "forcing",
            structured["logit_kl_batch_size"],
            PROMPT_TOKENS["structured"],
            levels + 1,
        ),
        Batch(
            "exact",
            "exact",
            evaluation["exact"]["batch_nodes"],
            PROMPT_TOKENS["structured"],
            levels=levels,
        ),
        generation("ssot", evaluation["ssot"]),
        generation("open_ended", evaluation["open_ended"]),
        generation("mcq", evaluation["mcq"]),
        generation("noveltybench", evaluation["noveltybench"]),
        Batch("tinybenchmarks", "decode", tiny["batch_size"], PROMPT_TOKENS["tinybenchmarks"], tiny["max_new_tokens"]),
        # continuations scored by log-likelihood, bounded by the generated answers' length
        Batch(
            "tinybenchmarks_loglik",
            "loglik",
            tiny["batch_size"],
            PROMPT_TOKENS["tinybenchmarks"],
            tiny["max_new_tokens"],
        ),
        Batch("paloma", "windows", paloma["batch_size"], paloma["window"]),
    ]


def _digest(checkpoint: Mapping) -> str:
    return hashlib.sha256(json.dumps(checkpoint, sort_keys=True).encode()).hexdigest()


class PeakTracker:
    """Bytes of the tensors created inside `with tracker:` off the CPU that are still alive, and their peak.

    A storage is counted once however many views share it, from the first tensor that holds it until the last
    one is freed; storages that existed before (the weights), and views of them, are not counted."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._holders: dict[int, list[int]] = {}  # storage -> [bytes, tensors alive that hold it]
        self._mode = None

    def _release(self, key: int) -> None:
        entry = self._holders[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._holders[key]

    def _hold(self, tensor, inputs: set[int]) -> None:
        if tensor.device.type == "cpu":  # a batch built on the host before it moves: no GPU memory
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        entry = self._holders.get(key)
        if entry is None:
            if key in inputs:  # a view of a tensor made before (a weight's transpose): nothing new
                return
            entry = self._holders[key] = [storage.nbytes(), 0]
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(tensor, self._release, key)

    def __enter__(self) -> PeakTracker:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        tracker = self

        def storages(values) -> set[int]:
            return {v.untyped_storage()._cdata for v in tree_flatten(values)[0] if isinstance(v, torch.Tensor)}

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                inputs = storages((args, kwargs))
                for value in tree_flatten(out)[0]:
                    if isinstance(value, torch.Tensor):
                        tracker._hold(value, inputs)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)


def training_inputs(config: Mapping) -> TrainingInputs:
    """The data of the plan's training batch (`gpu_batches`), on the soft training space with Qwen3's tokenizer."""
    from calibft.lm.packaged_tokenizers import load_packaged_tokenizer
    from calibft.training.largest_batch import TrainingInputs

    # Qwen3's tokenizer splits a value into a token per character, the most of the four families
    train = next(batch for batch in gpu_batches(config) if batch.training)
    return TrainingInputs.build(
        load_packaged_tokenizer("qwen3"), config["output_spaces"]["soft"], train.rows, train.prompt
    )


@dataclass(frozen=True)
class JobMemory:
    """The estimated peak per GPU of one job's largest batch, against the GPU memory it asks for."""

    model: str
    job: str
    gpus: int
    weights_gb: float  # the weights each GPU holds
    batch_gb: float  # what the batch adds, the optimizer state and FSDP's gathered units included
    estimate_gb: float
    requested_gb: float  # per GPU

    @property
    def headroom(self) -> float:
        return 1.0 - self.estimate_gb / self.requested_gb

    @property
    def fits(self) -> bool:
        return self.headroom >= HEADROOM


def _run_batch(model, batch: Batch, lora: Mapping, inputs: TrainingInputs) -> int:
    """Bytes the batch adds to the weights at its peak: the largest step of the batch's runner, run by the
    runner's own function."""
    import torch

    from calibft.evals.paloma.runner import largest_window_batch
    from calibft.evals.tinybench.choices import largest_loglik_batch
    from calibft.lm.generation import largest_decode_step
    from calibft.lm.models import attach_lora
    from calibft.lm.trie_walk import largest_node_batch
    from calibft.training.largest_batch import completion_log_probs, forcing_batch, training_step

    if batch.training:
        peft_model = attach_lora(model, dict(lora))
        peft_model.train()
        completion = inputs.completion_batch(batch.kind.removeprefix("train_"), batch.rows, batch.prompt)
        with PeakTracker() as tracker:
            training_step(peft_model, completion)
        # the optimizer step as train.py takes it; AdamW's states are counted per rank by `job_memory`
        torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad]).step()
        peft_model.unload()
        return tracker.peak
    with torch.no_grad(), PeakTracker() as tracker:
        if batch.kind == "decode":
            largest_decode_step(model, batch.prompt, batch.new, batch.rows)
        elif batch.kind == "exact":
            largest_node_batch(model, batch.prompt, batch.rows, batch.levels)
        elif batch.kind == "forcing":
            completion_log_probs(model, forcing_batch(batch.rows, batch.prompt, batch.new))
        elif batch.kind == "loglik":
            largest_loglik_batch(model, batch.rows, batch.prompt, batch.new)
        else:
            largest_window_batch(model, batch.rows, batch.prompt)
    return tracker.peak


@dataclass(frozen=True)
class Measured:
    """What a model holds and what each of its batches adds, in bytes (counts of elements times their sizes,
    so the same on every machine)."""

    weights: int
    lora: int  # the LoRA weights that training adds
    root: int  # FSDP's root unit: what no wrapped layer holds
    layer: int  # the largest wrapped layer
    peaks: dict[Batch, int]
    heads: dict[Batch, int]  # what each evaluation batch adds on a model without decoder layers: the logits

    def to_json(self) -> dict:
        return {
            "weights": self.weights,
            "lora": self.lora,
            "root": self.root,
            "layer": self.layer,
            "batches": [{**asdict(b), "peak": peak, "head": self.heads.get(b)} for b, peak in self.peaks.items()],
        }

    @classmethod
    def from_json(cls, record: Mapping) -> Measured:
        batches = [
            (Batch(**{k: v for k, v in row.items() if k not in ("peak", "head")}), row) for row in record["batches"]
        ]
        peaks = {batch: row["peak"] for batch, row in batches}
        heads = {batch: row["head"] for batch, row in batches if row["head"] is not None}
        return cls(record["weights"], record["lora"], record["root"], record["layer"], peaks, heads)


def measure(
    checkpoint: Mapping, batches: list[Batch], lora: Mapping, inputs: TrainingInputs, layers: int | None = None
) -> Measured:
    """`Measured` of the model of `checkpoint` (cut to `layers` decoder layers when given) for `batches`."""
    from calibft.lm.models import attach_lora, fsdp_units, parameter_bytes

    model = meta_model(checkpoint, layers)
    root, layer = fsdp_units(model)
    peft_model = attach_lora(model, dict(lora))
    lora_bytes = sum(p.numel() * p.element_size() for p in peft_model.parameters() if p.requires_grad)
    model = peft_model.unload()
    peaks = {batch: _run_batch(model, batch, lora, inputs) for batch in batches}
    head_model = meta_model(checkpoint, 0)
    heads = {batch: _run_batch(head_model, batch, lora, inputs) for batch in batches if not batch.training}
    return Measured(parameter_bytes(model), lora_bytes, root, layer, peaks, heads)


def _job(model: str, job: str, resources: Mapping, weights: float, batch_bytes: float) -> JobMemory:
    """A job's estimate from the bytes of the weights and of the batch that one of its GPUs holds."""
    return JobMemory(
        model=model,
        job=job,
        gpus=max(1, int(resources["gpus"])),
        weights_gb=weights / GB,
        batch_gb=batch_bytes / GB,
        estimate_gb=(weights + batch_bytes) * (1 + FRAGMENTATION) / GB + CONTEXT_GB,
        requested_gb=GPU_MEMORY_GB[resources["gpu_model"]],
    )


def job_memory(model_key: str, model_config: Mapping, batches: list[Batch], measured: Measured) -> list[JobMemory]:
    """Estimated peak memory per GPU of each batch for one model of config.yaml (`model_config`: its entry,
    with `resources` for training and `eval_resources` for evaluations)."""
    results = []
    for batch in batches:
        peak = measured.peaks[batch]
        resources = model_config["resources" if batch.training else "eval_resources"]
        gpus = max(1, int(resources["gpus"]))
        weights = measured.weights / gpus
        if batch.training:  # gradients of the flat parameters, AdamW's two LoRA states, FSDP's gathered units
            batch_bytes = peak + weights + 2 * measured.lora / gpus + 2 * measured.root + 4 * measured.layer
        else:  # the last GPU holds the logits
            batch_bytes = (peak - measured.heads[batch]) / gpus + measured.heads[batch]
        results.append(_job(model_key, batch.job, resources, weights, batch_bytes))
    return results


def evaluator_configs(config: Mapping, folder: Path = EVALUATORS) -> dict[str, dict]:
    """The config.json of NoveltyBench's evaluators, by `EVALUATOR_MODELS` key: as recorded in `folder`, else from
    the hub by the `evaluation.noveltybench.evaluators` id."""
    evaluators = config["evaluation"]["noveltybench"]["evaluators"]
    return {name: checkpoint_config(name, evaluators[name]["hf_id"], folder) for name in EVALUATOR_MODELS}


def scoring_memory(config: Mapping, folder: Path = EVALUATORS) -> JobMemory:
    """NoveltyBench's scoring job (`evaluation.noveltybench.scoring_resources`): the reward model in bf16 and the
    similarity classifier in fp32 (`calibft.evals.noveltybench.runner.score`) held together, each scoring its
    largest batch in turn (`largest_scoring_step`): `reward_batch_size` chats of a prompt and a generation, one pair
    of generations."""
    import torch

    from calibft.evals.noveltybench.runner import largest_scoring_step
    from calibft.lm.models import parameter_bytes

    noveltybench = config["evaluation"]["noveltybench"]
    evaluators = evaluator_configs(config, folder)
    reward = meta_model(evaluators["reward_model"], classifier=True)
    classifier = meta_model(evaluators["classifier"], classifier=True, dtype="float32")
    chat = PROMPT_TOKENS["noveltybench"] + noveltybench["sampling"]["max_new_tokens"] + REWARD_TEMPLATE_TOKENS
    with torch.no_grad(), PeakTracker() as tracker:
        largest_scoring_step(reward, classifier, noveltybench["reward_batch_size"], chat)
    resources = noveltybench["scoring_resources"]
    weights = (parameter_bytes(reward) + parameter_bytes(classifier)) / max(1, int(resources["gpus"]))
    return _job("evaluators", "noveltybench_scoring", resources, weights, tracker.peak)


def table(rows: list[JobMemory]) -> str:
    """The markdown table of docs/cluster.md."""
    lines = [
        "| model | job | GPUs | weights per GPU | batch | estimated peak | requested | headroom |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        mark = "" if row.fits else " (does not fit)"
        lines.append(
            f"| {row.model} | {row.job} | {row.gpus} | {row.weights_gb:.1f} GB | {row.batch_gb:.1f} GB | "
            f"{row.estimate_gb:.1f} GB | {row.requested_gb:.0f} GB | {math.floor(100 * row.headroom)}%{mark} |"
        )
    return "\n".join(lines)


def read_record(path: Path = RECORD) -> dict[str, tuple[str, Measured]]:
    """The recorded measurements: {model key: (digest of its checkpoint configuration, Measured)}."""
    if not path.exists():
        return {}
    record = json.loads(path.read_text())
    return {key: (entry["checkpoint"], Measured.from_json(entry)) for key, entry in record["models"].items()}


def write_record(entries: Mapping[str, tuple[str, Measured]], path: Path = RECORD) -> None:
    """Record measurements: {model key: (checkpoint digest, Measured)}, with the software that made them."""
    import torch
    import transformers

    from calibft.core.io import write_json

    models = {key: {"checkpoint": digest, **measured.to_json()} for key, (digest, measured) in sorted(entries.items())}
    write_json(path, {"torch": torch.__version__, "transformers": transformers.__version__, "models": models})


def plan_memory(config: Mapping, models: list[str] | None = None, record: Mapping | None = None, measure_missing=True):
    """Every GPU job's estimated peak per GPU for the models of `config` (all, or `models`; with all, NoveltyBench's
    scoring job too, measured afresh: `scoring_memory`), the measurements behind it ({model key: (checkpoint
    digest, Measured)}) and what was left out for want of a configuration ({model key or "evaluators": why}).

    A model is measured again unless `record` holds it for the same checkpoint configuration and the same
    batches; with `measure_missing` false that is an error instead (the test of the committed table)."""
    record = read_record() if record is None else record
    batches = gpu_batches(config)
    training = config["training"]
    inputs = None
    from tqdm import tqdm

    rows, measurements, left_out = [], {}, {}
    for key in tqdm(models or list(config["models"]), desc="models", unit="model", disable=not measure_missing):
        entry = config["models"][key]
        try:
            checkpoint = checkpoint_config(key, entry["hf_id"])
        except FileNotFoundError as err:
            left_out[key] = str(err)
            continue
        digest, recorded = _digest(checkpoint), record.get(key)
        if recorded and recorded[0] == digest and set(batches) <= set(recorded[1].peaks):
            measured = recorded[1]
        elif not measure_missing:
            raise ValueError(
                f"reference/memory.json has no measurement of model {key!r} for this checkpoint configuration and "
                f"these batches: run `calibft memory --record` and commit reference/memory.json and the table it "
                f"prints into docs/cluster.md"
            )
        else:
            inputs = inputs or training_inputs(config)
            measured = measure(checkpoint, batches, training["lora"], inputs)
        measurements[key] = (digest, measured)
        rows += job_memory(key, entry, batches, measured)
    if models is None:
        try:
            rows.append(scoring_memory(config))
        except FileNotFoundError as err:
            left_out["evaluators"] = str(err)
    return rows, measurements, left_out
