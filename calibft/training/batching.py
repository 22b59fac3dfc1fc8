"""The training order: family-balanced epochs, sharded across ranks and cut into batches, and the answer each item
of a batch trains on (docs/method.md, Batching)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from calibft.core.protocol import SWITCH
from calibft.data.output_space import SpaceSet
from calibft.data.trie import TrieSet


def balanced_order(families: Sequence[str], seed: int) -> list[int]:
    """Indices of the items in family-balanced order.

    The items of each family are shuffled (families taken in order of first appearance), then, round
    after round, the families that still have items, sorted by name and permuted (when more than one),
    each emit their next item. Every draw comes from one torch.Generator seeded with `seed`.
    """
    groups: dict[str, list[int]] = {}
    for index, name in enumerate(families):
        groups.setdefault(name, []).append(index)
    generator = torch.Generator().manual_seed(seed)
    for name, members in groups.items():
        groups[name] = [members[i] for i in torch.randperm(len(members), generator=generator).tolist()]

    order: list[int] = []
    for round_ in range(max(map(len, groups.values()), default=0)):
        active = [name for name in sorted(groups) if round_ < len(groups[name])]
        if len(active) > 1:
            active = [active[i] for i in torch.randperm(len(active), generator=generator).tolist()]
        order += [groups[name][round_] for name in active]
    return order


def epoch_items(families: Sequence[str], samples_per_prompt: int, seed: int, epoch: int) -> np.ndarray:
    """The prompt index of every training item of one epoch, in order: each prompt repeated
    `samples_per_prompt` times (each repeat gets its own sampled answer), family-balanced with seed + epoch."""
    repeated = np.repeat(np.arange(len(families)), samples_per_prompt)
    order = balanced_order([families[i] for i in repeated], seed + epoch)
    return repeated[order]


def shard(items: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The items of one rank: padded by wrapping around to a multiple of world_size, then strided, so every
    rank runs the same number of steps."""
    if world_size <= 1 or len(items) == 0:
        return items
    padded = np.concatenate([items, items[: (-len(items)) % world_size]])
    return padded[rank::world_size]


def batches(items: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of `batch_size`; the last one may be shorter."""
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]


def steps_per_epoch(num_prompts: int, samples_per_prompt: int, world_size: int, batch_size: int) -> int:
    """Optimizer steps of one epoch (one batch per rank per step)."""
    per_rank = -(-num_prompts * samples_per_prompt // world_size)
    return -(-per_rank // batch_size)


def total_steps(
    num_prompts: int, epochs: int, samples_per_prompt: int, max_steps: int | None, batch_size: int, world_size: int
) -> int:
    """Optimizer steps of a training run: its epochs' steps, capped at `max_steps` when it is given."""
    steps = epochs * steps_per_epoch(num_prompts, samples_per_prompt, world_size, batch_size)
    return steps if max_steps is None else min(steps, max_steps)


def batch_values(
    data: TrieSet | SpaceSet,
    items: np.ndarray,
    draw_seeds: str,
    seed: int,
    epoch: int,
    batch_index: int,
    rank: int,
    batch_size: int,
    world_size: int,
) -> np.ndarray:
    """The value each item of one batch trains on (its index in the prompt's output space), drawn from the
    prompt's target; `batch_index` counts the rank's batches within the epoch from 0, `batch_size` is the
    configured per-device size.

    `release`: item `offset` of the batch draws with numpy's `choice` from `default_rng(seed + epoch * 100000 +
    batch_index * batch_size * world_size + rank * batch_size + offset)`, as the authors' release does (also for a
    shorter last batch). `per_batch`: the batch's items draw one uniform each from `default_rng([seed, epoch,
    batch_index, rank])`. Either way the draws depend only on where the batch is, so a resumed run draws the same.
    """
    if draw_seeds == "per_batch":
        return data.sample_values(items, np.random.default_rng([seed, epoch, batch_index, rank]))
    if draw_seeds != "release":
        allowed = ", ".join(SWITCH["training_draw_seeds"].values)
        raise ValueError(f"draw_seeds must be one of {allowed}, got {draw_seeds!r}")
    first = seed + epoch * 100_000 + batch_index * batch_size * world_size + rank * batch_size
    return data.choose_values(items, range(first, first + len(items)))
