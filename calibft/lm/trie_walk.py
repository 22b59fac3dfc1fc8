"""Exact structured evaluation: the model's probability of every value of an output space, from its token trie.

A value's probability given the prompt is the product of the model's next-token probabilities along its tokens,
the last factor being the probability of ending there, and values that share a prefix share those factors. The
trie walk computes every node's log-probability log P(prefix | prompt) once: the prompt is run once, and every
internal node of the trie (a prefix that some value extends) is fed as one token on top of its parent's KV
cache, so a prompt costs its own length plus one token per internal node. A value's probability is then that of
its leaf (the node after its EOS), and the mass the model puts outside the space is what the leaves leave of 1.

The walk is depth first, in batches of at most `batch_nodes` sibling-level nodes: a batch's cache holds one row
per node (its parent's row, selected with the cache's own `batch_select_indices`, then extended by the node's
token), and the batches of the next level are taken from it before the rest of this level. Memory holds at most
one batch's cache per level of the trie.

The next-token distribution is the sampling engine's (`calibft.lm.generation`): the float32 softmax of the logits
divided by the temperature, top-p filtered; with `stop_ids`, ending a value means emitting any of them (the
engine stops on any), so the EOS leaf gets their summed probability.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from calibft.data.trie import Trie
from calibft.lm.generation import inference, input_device, top_p_filter

# internal nodes fed together: bounds the [batch, vocab] logits and each level's cache rows
DEFAULT_BATCH_NODES = 256


@dataclass(frozen=True)
class NextToken:
    """How the next-token distribution is taken from the logits: the sampling engine's settings, and the ids
    that end an answer (None: the trie's own EOS token only)."""

    temperature: float = 1.0
    top_p: float = 1.0
    stop_ids: tuple[int, ...] | None = None

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """float32 [rows, vocab] log-probabilities of each row's next token."""
        scaled = logits.float() / self.temperature
        if self.top_p >= 1:
            return torch.log_softmax(scaled, dim=-1)
        return torch.log(top_p_filter(torch.softmax(scaled, dim=-1), self.top_p))


def forwarded_tokens(prompt_length: int, trie: Trie) -> int:
    """Tokens the walk forwards for one prompt: the prompt, then one per internal node but the root."""
    return prompt_length + int(np.count_nonzero(trie.child_count[1:]))


def node_log_probs(
    model: Any,
    prompt_ids: Sequence[int],
    trie: Trie,
    batch_nodes: int = DEFAULT_BATCH_NODES,
    next_token: NextToken = NextToken(),
) -> np.ndarray:
    """float64 [num_nodes]: log P(prefix of node | prompt) for every node of `trie` under `model`.

    Node 0 (the empty prefix) is 0; a node of depth d >= 1 adds to its parent's the log-probability (float32,
    `next_token`), after the parent's prefix, of the token that leads into it, or for an EOS leaf of any stop
    token. The sums along a path are float64, so only the float32 terms carry rounding.
    """
    if batch_nodes < 1:
        raise ValueError(f"batch_nodes must be >= 1, got {batch_nodes}")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: the first token of a value needs logits to be scored from")
    device = input_device(model)
    scorer = _ChildScorer(trie, next_token)
    with inference(model):
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
        prefill = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        root = np.zeros(1, dtype=np.int64)
        scorer.score(root, prefill.logits[:, -1])
        # (internal nodes of one depth, each one's parent row in the cache, the cache of their parents)
        pending = [(*scorer.internal_children(root), prefill.past_key_values)]
        while pending:
            nodes, parent_rows, parent_cache = pending.pop()
            batch, rest = slice(0, batch_nodes), slice(batch_nodes, None)
            if len(nodes) > batch_nodes:  # the rest of this level waits below the batch's descendants
                pending.append((nodes[rest], parent_rows[rest], parent_cache))
            nodes, parent_rows = nodes[batch], parent_rows[batch]
            cache = copy.deepcopy(parent_cache)
            cache.batch_select_indices(torch.as_tensor(parent_rows, device=device))
            tokens = torch.as_tensor(trie.node_token[nodes], device=device).long()[:, None]
            out = model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1)
            scorer.score(nodes, out.logits[:, -1])
            children, rows = scorer.internal_children(nodes)
            if len(children):
                pending.append((children, rows, cache))
    return scorer.log_probs


class _ChildScorer:
    """Scores the children of parents whose log-probabilities are known, into `log_probs` (node 0 is 0)."""

    def __init__(self, trie: Trie, next_token: NextToken):
        self.trie, self.next_token = trie, next_token
        self.log_probs = np.zeros(trie.num_nodes, dtype=np.float64)
        self.child_start = trie.child_start.astype(np.int64)
        self.child_count = trie.child_count.astype(np.int64)
        self.leaves = np.zeros(trie.num_nodes, dtype=bool)  # the nodes after a value's EOS
        self.leaves[trie.value_leaf] = True
        stop_ids = next_token.stop_ids
        self.stop_ids = None if stop_ids is None else torch.tensor(stop_ids, dtype=torch.long)

    def children(self, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The children of `parents` (each parent's run in order) and the index in `parents` of each one's."""
        counts = self.child_count[parents]
        row = np.repeat(np.arange(len(parents)), counts)
        rank = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.child_start[parents][row] + rank, row

    def internal_children(self, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The children of `parents` that have children of their own, and the index in `parents` of each one's."""
        kids, row = self.children(parents)
        internal = self.child_count[kids] > 0
        return kids[internal], row[internal]

    def score(self, parents: np.ndarray, logits: torch.Tensor) -> None:
        """Score the children of `parents` from their next-token `logits` [len(parents), vocab] (row i after the
        prefix of parents[i])."""
        kids, row = self.children(parents)
        log_softmax = self.next_token.log_probs(logits)
        rows = torch.as_tensor(row, device=log_softmax.device)
        tokens = torch.as_tensor(self.trie.node_token[kids], device=log_softmax.device).long()
        terms = log_softmax[rows, tokens].double()
        if self.stop_ids is not None:
            ends = torch.as_tensor(self.leaves[kids], device=log_softmax.device)
            stop_terms = torch.logsumexp(log_softmax[:, self.stop_ids.to(log_softmax.device)], dim=-1).double()
            terms = torch.where(ends, stop_terms[rows], terms)
        self.log_probs[kids] = self.log_probs[parents][row] + terms.cpu().numpy()


def value_probabilities(
    model: Any,
    prompt_ids: Sequence[int],
    trie: Trie,
    batch_nodes: int = DEFAULT_BATCH_NODES,
    next_token: NextToken = NextToken(),
) -> tuple[np.ndarray, float]:
    """float64 [M] probability of each value of `trie` given the prompt, and the mass outside the space.

    A value's probability is that of its leaf, the node after its EOS (`node_log_probs`); the outside mass is 1
    minus their sum, clipped at 0 because float rounding can push the sum a hair above 1 when the model puts
    (almost) all its mass on the space.
    """
    log_probs = node_log_probs(model, prompt_ids, trie, batch_nodes, next_token)
    probs = np.exp(log_probs[trie.value_leaf])
    return probs, max(0.0, 1.0 - float(probs.sum()))
