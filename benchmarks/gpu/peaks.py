"""Peak memory of the GPU check's parts: what `torch.cuda.max_memory_allocated` measures, and what
`calibft.pipeline.memory` estimates for the same batches on the meta device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from benchmarks.gpu.settings import CONFIG, engine_settings
from calibft.pipeline import memory
from calibft.training.largest_batch import TrainingInputs

if TYPE_CHECKING:
    from benchmarks.gpu.exact import ExactInputs


def peak_gb(device: torch.device) -> float | None:
    """GB of tensors allocated on `device` at most since the last `reset_peak`; None off CUDA."""
    return round(torch.cuda.max_memory_allocated(device) / 1e9, 2) if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    """Starts `peak_gb`'s count of `device` afresh (nothing to do off CUDA)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


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
            min(args.answers, engine_settings(args.answers, 1).batch_size),
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
