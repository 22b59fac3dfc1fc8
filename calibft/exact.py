"""Exact structured evaluation: the model's probability of every value of an output space, from its token trie.

A value's probability given the prompt is the product of the model's next-token probabilities along its tokens
(EOS last), and values that share a prefix share those factors. Walking the trie depth by depth computes every
node's log-probability log P(prefix | prompt) once: the prompt is run once and its KV cache reused, and each
internal node costs one row of one forward pass, not one per value below it. A value's probability is then that
of its leaf (the node after its EOS), and the mass the model puts outside the space is what the leaves leave of 1.

Conventions follow `calibft.objectives` and `calibft.generation`: float32 log-softmax of the logits, eval mode and
no autograd (`inference`), inputs on the device of the input embeddings (`input_device`), and the prompt's cache
copied with `copy.deepcopy` and repeated along the batch with the cache's own `batch_repeat_interleave`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from calibft.generation import inference, input_device
from calibft.trie import Trie

# parent prefixes teacher-forced together: bounds the [batch, vocab] logits and the repeated prompt cache
DEFAULT_BATCH_NODES = 256


def depth_bounds(trie: Trie) -> np.ndarray:
    """[depths + 1] offsets: the nodes of depth d are `bounds[d]:bounds[d + 1]`.

    Nodes are numbered depth after depth and each depth's children follow it in one run, so the next depth holds
    exactly as many nodes as the current one has children.
    """
    bounds = [0, 1]
    while bounds[-1] < trie.num_nodes:
        width = int(trie.child_count[bounds[-2] : bounds[-1]].sum())
        if width == 0:  # cannot happen in a well-formed trie; guards against an endless loop on a corrupt one
            raise ValueError(f"trie nodes {bounds[-1]}:{trie.num_nodes} are not reached from the root")
        bounds.append(bounds[-1] + width)
    return np.asarray(bounds, dtype=np.int64)


def prefix_matrix(trie: Trie, nodes: np.ndarray, depth: int) -> np.ndarray:
    """[len(nodes), depth] token ids of the prefixes of `nodes`, all of depth `depth`, root side first.

    One column per step up the trie, all nodes at once (no loop over nodes).
    """
    tokens = np.empty((len(nodes), depth), dtype=np.int64)
    current = np.asarray(nodes, dtype=np.int64)
    for column in range(depth - 1, -1, -1):
        tokens[:, column] = trie.node_token[current]
        current = trie.node_parent[current].astype(np.int64)
    return tokens


def node_log_probs(
    model: Any, prompt_ids: Sequence[int], trie: Trie, batch_nodes: int = DEFAULT_BATCH_NODES
) -> np.ndarray:
    """float64 [num_nodes]: log P(prefix of node | prompt) for every node of `trie` under `model`.

    Node 0 (the empty prefix) is 0; a node of depth d >= 1 adds to its parent's the float32 log-softmax, after the
    parent's prefix, of the token that leads into it. The prompt is run once; its log-softmax gives depth 1. For
    each depth d >= 1, the nodes with children (every node but the leaves after an EOS) are teacher-forced in
    batches of at most `batch_nodes`: their d prefix tokens, on top of a copy of the prompt's cache repeated once
    per row, and the last position's log-softmax scores their children. This simple scheme recomputes each
    prefix at every depth (quadratic in the depth, which is short for output spaces) and keeps memory bounded by
    `batch_nodes`. The sums along a path are float64, so only the float32 terms carry rounding.
    """
    if batch_nodes < 1:
        raise ValueError(f"batch_nodes must be >= 1, got {batch_nodes}")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: the first token of a value needs logits to be scored from")
    device = input_device(model)
    bounds = depth_bounds(trie)
    log_probs = np.zeros(trie.num_nodes, dtype=np.float64)
    child_start = trie.child_start.astype(np.int64)
    child_count = trie.child_count.astype(np.int64)
    with inference(model):
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
        prefill = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        prompt_cache = prefill.past_key_values
        _score_children(trie, np.zeros(1, dtype=np.int64), prefill.logits[:, -1], log_probs, child_start, child_count)
        for depth in range(1, len(bounds) - 1):
            level = np.arange(bounds[depth], bounds[depth + 1])
            parents = level[child_count[level] > 0]
            if len(parents) == 0:
                continue
            prefixes = prefix_matrix(trie, parents, depth)
            for start in range(0, len(parents), batch_nodes):
                rows = slice(start, start + batch_nodes)
                # the next batch needs the prompt's cache intact: copy it, then repeat it along the batch
                cache = copy.deepcopy(prompt_cache)
                cache.batch_repeat_interleave(len(prefixes[rows]))
                inputs = torch.as_tensor(prefixes[rows], device=device)
                out = model(input_ids=inputs, past_key_values=cache, use_cache=True, logits_to_keep=1)
                _score_children(trie, parents[rows], out.logits[:, -1], log_probs, child_start, child_count)
    return log_probs


def _score_children(
    trie: Trie,
    parents: np.ndarray,
    logits: torch.Tensor,
    log_probs: np.ndarray,
    child_start: np.ndarray,
    child_count: np.ndarray,
) -> None:
    """Write the log-probabilities of the children of `parents` into `log_probs`, from the parents' next-token
    `logits` [len(parents), vocab] (row i after the prefix of parents[i]); the parents' own are already there."""
    counts = child_count[parents]
    row = np.repeat(np.arange(len(parents)), counts)
    # each parent's children are one contiguous run: its first child plus the rank within the run
    rank = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    kids = child_start[parents][row] + rank
    log_softmax = torch.log_softmax(logits.float(), dim=-1)
    rows = torch.as_tensor(row, device=log_softmax.device)
    tokens = torch.as_tensor(trie.node_token[kids], device=log_softmax.device).long()
    terms = log_softmax[rows, tokens]
    log_probs[kids] = log_probs[parents][row] + terms.double().cpu().numpy()


def value_probabilities(
    model: Any, prompt_ids: Sequence[int], trie: Trie, batch_nodes: int = DEFAULT_BATCH_NODES
) -> tuple[np.ndarray, float]:
    """float64 [M] probability of each value of `trie` given the prompt, and the mass outside the space.

    A value's probability is that of its leaf, the node after its EOS (`node_log_probs`); the outside mass is 1
    minus their sum, clipped at 0 because float rounding can push the sum a hair above 1 when the model puts
    (almost) all its mass on the space.
    """
    probs = np.exp(node_log_probs(model, prompt_ids, trie, batch_nodes)[trie.value_leaf])
    return probs, max(0.0, 1.0 - float(probs.sum()))
