"""Exact structured evaluation: the model's probability of every value of an output space, from its token trie.

A value's probability given the prompt is the product of the model's next-token probabilities along its tokens,
the last factor being the probability of ending there, and values that share a prefix share those factors. The
trie walk computes every node's log-probability log P(prefix | prompt) once: the prompt is run once into a KV
cache, and every internal node of the trie (a prefix that some value extends) is fed once, as one token on top
of the prompt's cache, so a prompt costs its own length plus one token per internal node (plus, per batch, the
few ancestors of its first node). A value's probability is then that of its leaf (the node after its EOS), and
the mass the model puts outside the space is what the leaves leave of 1.

The internal nodes are fed in depth-first order, `batch_nodes` at a time, as one sequence after the prompt: a
tree attention mask lets each node see the prompt and its own ancestors only, and its position id is the
prompt's length plus its depth, so each node's logits are those of its prefix alone. In depth-first order every
ancestor of a batch's node is in the batch or is an ancestor of the batch's first node, so a batch is its nodes
plus that first node's ancestors. Nothing is copied per node: memory holds the prompt's cache and one batch. The
masks apply each layer's sliding window by position, as the model's own masks do; every layer of the prompt's
cache keeps every token, so that the windows are the masks' alone.

`adaptive_node_log_probs` expands only the most probable prefixes, until a caller's test says that what it
knows is enough (`calibft.evals.exact.bounds`: certified bounds on the evaluation's figures); a prefix left
unexpanded stands for every value below it.

The next-token distribution is the sampling engine's (`calibft.lm.generation`): the float32 softmax of the logits
divided by the temperature, top-p filtered; with `stop_ids`, ending a value means emitting any of them (the
engine stops on any), so the EOS leaf gets their summed probability.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from calibft.data.trie import Trie
from calibft.lm.generation import inference, input_device, top_p_filter

# internal nodes fed together: bounds the [batch, vocab] logits and the batch's activations
DEFAULT_BATCH_NODES = 256
# the share of a trie's internal nodes past which the adaptive walk expands the rest in depth-first order
ADAPTIVE_SHARE = 0.1


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


def forwarded_tokens(prompt_length: int, trie: Trie, batch_nodes: int = DEFAULT_BATCH_NODES) -> int:
    """Tokens the walk forwards for one prompt: the prompt, one per internal node but the root, and the ancestors
    of each batch's first node."""
    shape = TreeShape.of(trie)
    firsts = shape.order[::batch_nodes]
    return prompt_length + len(shape.order) + int((shape.depth[firsts] - 1).sum())


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
    _check_arguments(model, prompt_ids, batch_nodes)
    shape = TreeShape.of(trie)
    scorer = _ChildScorer(trie, next_token)
    with inference(model):
        feed = _NodeFeeder(model, prompt_ids, trie, shape)
        scorer.score(np.zeros(1, dtype=np.int64), feed.prompt_logits)
        for start in range(0, len(shape.order), batch_nodes):
            nodes = shape.order[start : start + batch_nodes]
            # the first node's ancestors (root and itself excluded), then the batch
            scorer.score(nodes, feed(trie.ancestors(int(nodes[0]))[1:-1], nodes))
    return scorer.log_probs()


def _check_arguments(model: Any, prompt_ids: Sequence[int], batch_nodes: int) -> None:
    if batch_nodes < 1:
        raise ValueError(f"batch_nodes must be >= 1, got {batch_nodes}")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: the first token of a value needs logits to be scored from")
    attention = getattr(model.config, "_attn_implementation", "sdpa")
    if attention not in ("sdpa", "eager"):
        raise ValueError(
            f"the exact walk's tree attention mask needs attn_implementation 'sdpa' or 'eager', not {attention!r}"
        )


class _NodeFeeder:
    """Runs the prompt once into a KV cache (`prompt_logits`: the logits after it), then feeds trie nodes after
    that cache: a call with a batch of nodes and the ancestors they need returns the batch's next-token logits.
    To be used under `inference(model)`."""

    def __init__(self, model: Any, prompt_ids: Sequence[int], trie: Trie, shape: TreeShape):
        self.model, self.trie, self.depth = model, trie, shape.depth
        self.prompt_length, self.device = len(prompt_ids), input_device(model)
        self.masks = _TreeMasks(model, len(prompt_ids), trie, shape)
        self.tokens = len(prompt_ids)  # tokens fed so far
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        self.prompt_cache, self.prompt_logits = prompt_prefill(model, prompt)

    def __call__(self, ancestors: np.ndarray, nodes: np.ndarray) -> torch.Tensor:
        """[len(nodes), vocab] logits after each of `nodes`; `ancestors` holds every ancestor of theirs (the root
        excepted) that is not one of them."""
        fed = np.concatenate([ancestors, nodes])
        self.tokens += len(fed)
        input_ids = torch.as_tensor(self.trie.node_token[fed], device=self.device).long()[None]
        position_ids = torch.as_tensor(self.prompt_length - 1 + self.depth[fed], device=self.device)[None]
        return node_logits(self.model, self.prompt_cache, input_ids, position_ids, self.masks.of(fed), len(nodes))


def prompt_prefill(model: Any, prompt: torch.Tensor) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The prompt [1, length] run once: each layer's keys and values, and the [1, vocab] logits after it. Its cache
    has full layers only, so that every token of the prompt stays in it; the masks apply the sliding windows."""
    prefill = model(input_ids=prompt, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in prefill.past_key_values.layers], prefill.logits[:, -1]


def node_logits(
    model: Any,
    prompt_cache: list[tuple[torch.Tensor, torch.Tensor]],
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    masks: torch.Tensor | dict[str, torch.Tensor],
    scored: int,
) -> torch.Tensor:
    """One batch of nodes fed after the prompt's cache as one sequence (`input_ids`, `position_ids` [1, fed]) under
    their tree `masks`: the [scored, vocab] logits of its last `scored` tokens."""
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=masks,
        past_key_values=DynamicCache(prompt_cache),  # a new cache on the prompt's tensors: they stay as is
        use_cache=True,
        logits_to_keep=scored,
    )
    return out.logits[0]


def largest_node_batch(
    model: Any, prompt_length: int, batch_nodes: int, depth: int, next_token: NextToken = NextToken()
) -> None:
    """The walk's largest batch, on token ids of zeros on the model's device (the meta device for the memory
    estimate): a prompt's cache, then `batch_nodes` nodes and the ancestors of the first (at most `depth` - 1 in
    a trie whose internal nodes are at most `depth` deep) fed after it under their masks, and the rows'
    next-token log-probabilities."""
    device = input_device(model)
    prompt_cache, _ = prompt_prefill(model, torch.zeros(1, prompt_length, dtype=torch.long, device=device))
    fed = batch_nodes + depth - 1
    chain = np.tril(np.ones((fed, fed), dtype=bool))  # the masks' shapes, whatever nodes they hold
    masks = tree_masks(model, prompt_length, chain, prompt_length + np.arange(fed))
    ids = torch.zeros(1, fed, dtype=torch.long, device=device)
    next_token.log_probs(node_logits(model, prompt_cache, ids, ids, masks, batch_nodes))


@dataclass
class PartialWalk:
    """What a walk that expanded some of a trie's internal nodes knows of one prompt. A node is scored once its
    parent is expanded (the root always is); the frontier is the scored internal nodes not expanded yet, each
    standing for every value below it."""

    log_probs: np.ndarray  # float64 [N]: log P(prefix | prompt) of the scored nodes, NaN for the others
    expanded: np.ndarray  # bool [N]: the nodes whose children are scored
    tokens: int = 0  # tokens forwarded, the prompt included

    @classmethod
    def start(cls, trie: Trie) -> PartialWalk:
        """Nothing expanded: only the root (log-probability 0) is scored."""
        log_probs = np.full(trie.num_nodes, np.nan)
        log_probs[0] = 0.0
        return cls(log_probs, np.zeros(trie.num_nodes, dtype=bool))

    def frontier(self, trie: Trie) -> np.ndarray:
        """The scored internal nodes not yet expanded, by index."""
        return np.flatnonzero(~np.isnan(self.log_probs) & ~self.expanded & (trie.child_count > 0))


def adaptive_node_log_probs(
    model: Any,
    prompt_ids: Sequence[int],
    trie: Trie,
    done: Callable[[PartialWalk], bool],
    batch_nodes: int = DEFAULT_BATCH_NODES,
    next_token: NextToken = NextToken(),
) -> PartialWalk:
    """Expands the trie's most probable prefixes first, until `done(walk)` is true or no frontier is left.

    It works in rounds under a probability threshold: a round expands every frontier node at or above the
    threshold, then their children at or above it, and so on; `done` is asked after each round, when every
    prefix at or above the threshold is expanded, and the next round's threshold is a quarter of the last (the
    first is the root's most probable child's). A step's nodes are fed in depth-first order, `batch_nodes` at a
    time, each batch with the union of its nodes' ancestors: about one more token per node than
    `node_log_probs`. Once `ADAPTIVE_SHARE` of the internal nodes are expanded, the walk expands the rest in
    depth-first order without asking, where a batch's ancestors are mostly in it, so that a walk that needs the
    whole trie costs about twice that share more than `node_log_probs`. Each node's log-probability is its
    parent's plus its own term, as there, so a node gets the same number either way up to the float32 rounding
    of its batch's forward pass."""
    _check_arguments(model, prompt_ids, batch_nodes)
    shape = TreeShape.of(trie)
    scorer = _ChildScorer(trie, next_token)
    walk = PartialWalk.start(trie)
    parent = trie.node_parent.astype(np.int64)
    rank = np.empty(trie.num_nodes, dtype=np.int64)  # each internal node's place in depth-first order
    rank[shape.order] = np.arange(len(shape.order))

    def ancestors(nodes: np.ndarray) -> np.ndarray:
        found, up = [np.zeros(0, dtype=np.int64)], parent[nodes]
        while len(up := np.unique(up[up > 0])):
            found.append(up)
            up = parent[up]
        return np.setdiff1d(np.concatenate(found), nodes)

    def expand(nodes: np.ndarray, logits: torch.Tensor) -> None:
        scorer.score(nodes, logits)
        for level in np.unique(shape.depth[nodes]):  # a parent in the batch is scored before its children
            at = nodes[shape.depth[nodes] == level]
            kids, row = scorer.children(at)
            walk.log_probs[kids] = walk.log_probs[at][row] + scorer.terms[kids]
        walk.expanded[nodes] = True

    def expand_in_order(due: np.ndarray) -> None:
        """Expand `due` (depth first, each node after its unexpanded ancestors)."""
        for start in range(0, len(due), batch_nodes):
            nodes = due[start : start + batch_nodes]
            expand(nodes, feed(ancestors(nodes), nodes))

    with inference(model):
        feed = _NodeFeeder(model, prompt_ids, trie, shape)
        expand(np.zeros(1, dtype=np.int64), feed.prompt_logits)
        frontier = walk.frontier(trie)
        threshold = float(walk.log_probs[frontier].max()) if len(frontier) else 0.0
        while len(frontier) and not done(walk):
            if walk.expanded.sum() > ADAPTIVE_SHARE * len(shape.order):
                expand_in_order(shape.order[~walk.expanded[shape.order]])
                break
            while len(due := frontier[walk.log_probs[frontier] >= threshold]):
                expand_in_order(due[np.argsort(rank[due], kind="stable")])
                frontier = walk.frontier(trie)
            threshold -= np.log(4)
        walk.tokens = feed.tokens
    return walk


@dataclass(frozen=True)
class TreeShape:
    """A trie's nodes as the walk feeds them: each node's depth, and the internal nodes but the root in depth-first
    order (a node before its children, siblings in trie order)."""

    depth: np.ndarray  # int64 [N]; 0 for the root
    order: np.ndarray  # int64: the internal nodes but the root, depth first

    @classmethod
    def of(cls, trie: Trie) -> TreeShape:
        n = trie.num_nodes
        parent = trie.node_parent.astype(np.int64)
        # each node's rank among its siblings, plus one (0 marks "no ancestor at this depth" and sorts first)
        rank = np.zeros(n, dtype=np.int64)
        rank[1:] = np.arange(1, n) - trie.child_start[parent[1:]] + 1
        # up[j]: each node's ancestor j levels up (0 once past the root)
        up, depth = [np.arange(n)], np.zeros(n, dtype=np.int64)
        while up[-1].any():
            depth += up[-1] > 0
            up.append(np.where(up[-1] > 0, parent[up[-1]], 0))
        # path[i, d]: rank of node i's ancestor at depth d + 1, itself included; lexicographic order is depth first
        path = np.zeros((n, max(int(depth.max()), 1)), dtype=np.int64)
        for j, ancestor in enumerate(up[:-1]):
            row = np.flatnonzero(depth - j >= 1)
            path[row, depth[row] - j - 1] = rank[ancestor[row]]
        order = np.lexsort(path.T[::-1])
        internal = order[(trie.child_count[order] > 0) & (order > 0)]
        return cls(depth, internal)


def sliding_window(model: Any) -> int | None:
    """The window of the model's sliding-window attention layers; None where it has none."""
    config = model.config.get_text_config(decoder=True)
    layer_types = getattr(config, "layer_types", None) or []
    return config.sliding_window if "sliding_attention" in layer_types else None


def layer_masks(full: torch.Tensor, sliding: torch.Tensor | None) -> torch.Tensor | dict[str, torch.Tensor]:
    """The `attention_mask` argument of a model's forward: the full layers' 4D mask alone, or with the sliding-window
    layers' by layer type (the keys of `layer_types`) where the model has such layers."""
    return full if sliding is None else {"full_attention": full, "sliding_attention": sliding}


def tree_masks(
    model: Any, prompt_length: int, tree: np.ndarray, position: np.ndarray
) -> torch.Tensor | dict[str, torch.Tensor]:
    """Additive attention masks of nodes fed after the prompt, a tensor or one per layer type: node i sees the
    prompt and the fed nodes j with `tree[i, j]` (its ancestors and itself), and on sliding-window layers only the
    keys fewer than the window's positions behind its `position` (the model's own rule,
    `transformers.masking_utils.sliding_window_overlay`)."""
    dtype, device, window = model.get_input_embeddings().weight.dtype, input_device(model), sliding_window(model)

    def additive(allowed: np.ndarray) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(torch.as_tensor(~allowed, device=device), torch.finfo(dtype).min)
        return mask[None, None]

    allowed = np.concatenate([np.ones((len(tree), prompt_length), dtype=bool), tree], axis=1)
    if window is None:
        return layer_masks(additive(allowed), None)
    key_position = np.concatenate([np.arange(prompt_length), position])
    in_window = position[:, None] - key_position[None, :] < window
    return layer_masks(additive(allowed), additive(allowed & in_window))


class _TreeMasks:
    """The masks (`tree_masks`) of the batches of one trie fed after the prompt: each node sees the prompt, its
    ancestors and itself."""

    def __init__(self, model: Any, prompt_length: int, trie: Trie, shape: TreeShape):
        self.model, self.prompt_length, self.depth = model, prompt_length, shape.depth
        self.parent = trie.node_parent.astype(np.int64)
        self.slot = np.full(trie.num_nodes, -1, dtype=np.int64)  # each fed node's index in the batch

    def of(self, fed: np.ndarray) -> torch.Tensor | dict[str, torch.Tensor]:
        """The mask of the nodes `fed` (each node's ancestors among them): a tensor, or per layer type."""
        rows = np.arange(len(fed))
        self.slot[fed] = rows
        tree = np.zeros((len(fed), len(fed)), dtype=bool)
        node = fed.copy()
        while len(rows):
            tree[rows, self.slot[node]] = True
            node = self.parent[node]
            kept = node > 0
            rows, node = rows[kept], node[kept]
        self.slot[fed] = -1
        return tree_masks(self.model, self.prompt_length, tree, self.prompt_length - 1 + self.depth[fed])


class _ChildScorer:
    """Scores the children of scored parents: the log-probability of the token (or, for an EOS leaf, of ending)
    that leads from each parent into each child; `log_probs` sums them along the paths (node 0 is 0)."""

    def __init__(self, trie: Trie, next_token: NextToken):
        self.trie, self.next_token = trie, next_token
        self.terms = np.zeros(trie.num_nodes, dtype=np.float64)
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
        self.terms[kids] = terms.cpu().numpy()

    def log_probs(self) -> np.ndarray:
        """Each node's parent's log-probability plus its own term, level by level from the root's children."""
        log_probs = np.zeros(self.trie.num_nodes, dtype=np.float64)
        level = np.zeros(1, dtype=np.int64)
        while len(level):
            kids, row = self.children(level)
            log_probs[kids] = log_probs[level][row] + self.terms[kids]
            level = kids[self.child_count[kids] > 0]
        return log_probs


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
