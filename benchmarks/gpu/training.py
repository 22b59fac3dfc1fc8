"""The GPU check's training figures: soft and hard LoRA steps as the paper's training runs them."""

from __future__ import annotations

import statistics

import numpy as np
import torch

from benchmarks.gpu.peaks import peak_gb, reset_peak
from benchmarks.gpu.settings import CONFIG
from benchmarks.tiny_model import timed
from calibft.lm.models import attach_lora
from calibft.training.objectives import hard_batch_loss, soft_batch_loss


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

    def step(objective, i: int) -> torch.Tensor:
        """One optimizer step on batch `i` of `objective`; its loss."""
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss, _ = objective(i)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    figures = {
        "per_device_batch_size": batch,
        "trainable_parameters": sum(p.numel() for p in optimizer.param_groups[0]["params"]),
    }

    for name, objective in objectives.items():
        reset_peak(device)
        times, losses = [], []
        for i in range(args.steps + 2):
            seconds, loss = timed(device, step, objective, i)
            losses.append(float(loss.detach()))
            if i >= 2:
                times.append(1000 * seconds)
        figures[f"{name}_ms_per_step"] = round(statistics.median(times), 1)
        figures[f"{name}_peak_gb"] = peak_gb(device)
        figures[f"{name}_losses"] = [round(x, 4) for x in losses]
        figures[f"{name}_losses_finite"] = bool(np.isfinite(losses).all())
    return figures
