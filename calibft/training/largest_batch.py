"""The largest batches that training and teacher forcing run, built by the objectives' own batch builders, and
the forward pass that both objectives and the logit KL take of a batch; `calibft.pipeline.memory` runs them on
models on the meta device to count what a batch allocates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, trie_set_for_spaces
from calibft.training.objectives import CompletionBatch, hard_batch, loss_logits, make_batch, soft_batch, step_log_probs


@dataclass(frozen=True)
class TrainingInputs:
    """A training batch's data: the training spaces and tries of `rows` training prompts and prompt ids long
    enough that each sequence, with the longest completion, fills `seq_len` tokens."""

    tokenizer: object
    spaces: SpaceSet
    tries: TrieSet
    prompt_ids: list[list[int]]

    @classmethod
    def build(cls, tokenizer, space: Mapping, rows: int, seq_len: int) -> TrainingInputs:
        """The first `rows` training prompts in `space` (an `output_spaces` entry) under `tokenizer`."""
        chosen = prompts("train")[:rows]
        spaces = SpaceSet.from_spaces(
            [p.id for p in chosen], spaces_for_prompts(chosen, space["decimals"], space["max_bins"])
        )
        tries = trie_set_for_spaces(tokenizer, spaces)
        longest = int(tries.value_length.max())
        return cls(tokenizer, spaces, tries, [[tokenizer.eos_token_id] * (seq_len - longest)] * rows)

    def completion_batch(self, objective: str, rows: int, seq_len: int) -> CompletionBatch:
        """The batch of `rows` items that the `soft` (a trie path per prompt, `soft_batch`) or `hard` (a canonical
        string per prompt, `hard_batch`) objective builds, each item's value drawn from its target."""
        items, rng = np.arange(rows), np.random.default_rng(0)
        pad = self.tokenizer.eos_token_id
        if objective == "soft":
            values = self.tries.sample_values(items, rng)
            return soft_batch(self.tries, items, values, self.prompt_ids, pad, seq_len)[0]
        values = self.spaces.sample_values(items, rng)
        return hard_batch(self.spaces, items, values, self.prompt_ids, pad, self.tokenizer, seq_len)


def forcing_batch(rows: int, prompt_length: int, completion_length: int) -> CompletionBatch:
    """The largest teacher-forced batch: `rows` prompts of `prompt_length` tokens, each followed by a completion of
    `completion_length` tokens (ids of zeros: the cost is set by the shapes)."""
    completions = np.zeros((rows, completion_length), dtype=np.int64)
    return make_batch([[0] * prompt_length] * rows, completions, np.full(rows, completion_length), pad_id=0)


def completion_log_probs(model, batch: CompletionBatch, temperature: float = 1.0) -> torch.Tensor:
    """The float32 log-probabilities of every completion step of `batch` from one forward pass (`loss_logits`,
    `step_log_probs`): the largest tensors that either objective and the logit KL make of the logits. The
    objectives' index arithmetic reads values, which a model on the meta device has none of."""
    return step_log_probs(loss_logits(model, batch.to(next(model.parameters()).device), "fp32"), temperature)


def training_step(model, batch: CompletionBatch) -> None:
    """A training step's forward and backward on `batch`, through `completion_log_probs`."""
    completion_log_probs(model, batch).mean().backward()
