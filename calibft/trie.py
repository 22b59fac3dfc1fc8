"""Token tries over canonical output spaces, stored as flat arrays (REFERENCE section 5).

Every canonical string is tokenized alone (no special tokens) and the tokenizer's EOS is appended. Node 0
is the empty prefix; the nodes of depth t+1 are numbered after those of depth t, sorted by (parent, token),
so the children of every node are one contiguous run `child_start[p] : child_start[p] + child_count[p]`.
The target at prefix p is q(child | p) = mass[child] / mass[p].

A `TrieSet` keeps the tries of many prompts concatenated (node and value indices local to each prompt,
with per-prompt offsets) and is saved as one `.npz` file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Encoding
from tqdm import tqdm

from calibft.io import load_npz, save_npz
from calibft.output_space import OutputSpace, SpaceSet
from calibft.ragged import concatenate_fields, index_of, offsets, sample_segments


@dataclass(frozen=True)
class Trie:
    """The prefix trie of one output space; node and value indices are local to it."""

    node_parent: np.ndarray  # int32 [N]; -1 for the root
    node_token: np.ndarray  # int32 [N]; the token that leads into the node; -1 for the root
    node_mass: np.ndarray  # float64 [N]; total mass of the values below the node
    child_start: np.ndarray  # int32 [N]
    child_count: np.ndarray  # int32 [N]
    value_leaf: np.ndarray  # int32 [M]; the node reached after the EOS of each value
    value_length: np.ndarray  # int32 [M]; tokens of each value, EOS included
    value_probs: np.ndarray  # float64 [M]

    @property
    def num_nodes(self) -> int:
        return len(self.node_parent)

    def children(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """The child tokens of a node and their targets q(v | node)."""
        kids = np.arange(self.child_start[node], self.child_start[node] + self.child_count[node])
        return self.node_token[kids], self.node_mass[kids] / self.node_mass[node]

    def ancestors(self, node: int) -> np.ndarray:
        """The nodes from the root down to `node`, both included."""
        nodes = [node]
        while nodes[-1] != 0:
            nodes.append(int(self.node_parent[nodes[-1]]))
        return np.array(nodes[::-1], dtype=np.int64)

    def prefix_tokens(self, node: int) -> np.ndarray:
        """The token ids of the prefix that `node` stands for."""
        return self.node_token[self.ancestors(node)[1:]]

    def value_tokens(self, value: int) -> np.ndarray:
        """The token ids of one value, EOS included."""
        return self.prefix_tokens(int(self.value_leaf[value]))


@dataclass(frozen=True)
class TokenizedValues:
    """Token ids of canonical strings, EOS included, as a padded matrix."""

    tokens: np.ndarray  # int32 [M, max length], padded with -1
    lengths: np.ndarray  # int64 [M]

    def __getitem__(self, rows) -> TokenizedValues:
        return TokenizedValues(self.tokens[rows], self.lengths[rows])

    @classmethod
    def from_lists(cls, token_ids: Sequence[Sequence[int]]) -> TokenizedValues:
        lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
        return cls(_pad(np.concatenate([np.asarray(ids, dtype=np.int32) for ids in token_ids]), lengths), lengths)


def tokenize_values(tokenizer, values: Sequence[str] | np.ndarray, chunk: int = 16384) -> TokenizedValues:
    """Every canonical string (str, or ASCII bytes) encoded alone, no special tokens, EOS appended.

    Batched calls of `chunk` strings keep the tokenizer's own buffers small. A Rust ("fast") tokenizer
    encodes each batch on every core, 256 strings to a text (`_encode_joined`) unless a batch shows that
    its pieces are not independent; then it, and a tokenizer without a Rust backend, encode one string
    at a time (`_encode_each`).
    """
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no EOS token; a trie needs one to end every value")
    joined = getattr(tokenizer, "backend_tokenizer", None) is not None
    values = np.asarray(values)
    ids, lengths = [], []
    for start in range(0, len(values), chunk):
        batch = values[start : start + chunk]
        strings = (np.strings.decode(batch, "ascii") if batch.dtype.kind == "S" else batch).tolist()
        encoded = _encode_joined(tokenizer, strings) if joined else None
        if encoded is None:
            joined = False  # this tokenizer's pieces depend on each other: no use joining the next batches
            encoded = _encode_each(tokenizer, strings)
        ids.append(encoded[0])
        lengths.append(encoded[1])
    lengths = np.concatenate(lengths)
    return TokenizedValues(_pad(np.concatenate(ids), lengths), lengths)


# strings per encoded text of `_encode_joined`: few Encoding objects, and still many texts to share between cores
_JOINED = 256
# strings per batch whose joined encoding is checked against encoding them alone
_CHECKED = 32


def _encode_joined(tokenizer, strings: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids of every string followed by EOS, flat, and each string's length with its EOS; None when
    the joined encoding is not that of the strings alone.

    A fast tokenizer splits its input at its added tokens first (transformers registers the EOS as one)
    and encodes the pieces between them independently, so the text "s1<eos>s2<eos>..." encodes to
    ids(s1) EOS ids(s2) EOS ...: one Encoding per `_JOINED` strings instead of one per string, which
    takes 40% off the time of the many short strings of an output space. A tokenizer for which the
    pieces are not independent (a Metaspace that prepends only at the start of the text, special tokens
    encoded as text) is caught by the EOS count and by encoding a spread of the strings alone.
    """
    backend, eos, eos_text = tokenizer.backend_tokenizer, tokenizer.eos_token_id, tokenizer.eos_token
    texts = [eos_text.join(strings[i : i + _JOINED]) + eos_text for i in range(0, len(strings), _JOINED)]
    ids = np.concatenate(
        [np.array(e.ids, dtype=np.int32) for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    )
    ends = np.flatnonzero(ids == eos)
    if len(ends) != len(strings):
        return None
    lengths = np.diff(ends, prepend=-1)
    starts = ends - lengths + 1
    checked = np.unique(np.linspace(0, len(strings) - 1, _CHECKED).astype(np.int64))
    alone = backend.encode_batch_fast([strings[i] for i in checked], add_special_tokens=False)
    if any(ids[starts[i] : ends[i]].tolist() != e.ids for i, e in zip(checked, alone, strict=True)):
        return None
    return ids, lengths


def _encode_each(tokenizer, strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """As `_encode_joined`, one string at a time: one Encoding per string, or one list with a slow tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        encodings = backend.encode_batch_fast(strings, add_special_tokens=False)
        flat, lengths = Encoding.merge(encodings, growing_offsets=False).ids, list(map(len, encodings))
    else:
        encoded = tokenizer(strings, add_special_tokens=False)["input_ids"]
        flat, lengths = [t for seq in encoded for t in seq], list(map(len, encoded))
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.insert(np.asarray(flat, dtype=np.int32), np.cumsum(lengths), tokenizer.eos_token_id), lengths + 1


def _pad(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Rows of `lengths` tokens taken in order from `flat`, padded with -1 to the longest."""
    width = int(lengths.max())
    tokens = np.full((len(lengths), width), -1, dtype=np.int32)
    tokens[np.arange(width) < lengths[:, None]] = flat
    return tokens


def build_trie(values: TokenizedValues, probs: np.ndarray) -> Trie:
    """The trie of tokenized values with masses `probs`, built depth by depth, vectorized."""
    probs = np.asarray(probs, dtype=np.float64)
    tokens, lengths = values.tokens.astype(np.int64), values.lengths
    vocab = int(tokens.max()) + 1
    parents, toks, masses = [np.array([-1])], [np.array([-1])], [np.array([probs.sum()])]
    node = np.zeros(len(lengths), dtype=np.int64)  # the current node of every value
    num_nodes = 1
    for depth in range(int(lengths.max())):
        alive = np.flatnonzero(lengths > depth)
        # one int64 key per (parent, token): sorting it sorts by parent, then token
        keys = node[alive] * vocab + tokens[alive, depth]
        unique_keys, inverse = np.unique(keys, return_inverse=True)
        node[alive] = num_nodes + inverse
        parents.append(unique_keys // vocab)
        toks.append(unique_keys % vocab)
        masses.append(np.bincount(inverse, weights=probs[alive], minlength=len(unique_keys)))
        num_nodes += len(unique_keys)

    node_parent = np.concatenate(parents)
    child_count = np.bincount(node_parent[1:], minlength=num_nodes)
    # node_parent[1:] is non-decreasing (nodes are numbered by depth, then parent), so children are runs
    child_start = np.searchsorted(node_parent[1:], np.arange(num_nodes)) + 1
    return Trie(
        node_parent=node_parent.astype(np.int32),
        node_token=np.concatenate(toks).astype(np.int32),
        node_mass=np.concatenate(masses),
        child_start=np.where(child_count > 0, child_start, 0).astype(np.int32),
        child_count=child_count.astype(np.int32),
        value_leaf=node.astype(np.int32),
        value_length=lengths.astype(np.int32),
        value_probs=probs,
    )


@dataclass(frozen=True)
class PathTargets:
    """Per-step sparse targets of a batch of sampled paths, flat and ready for a batched loss.

    Example b has `lengths[b]` steps; step t of it sits at flat step `step_offsets[b] + t`, predicts
    `tokens[b, t]` (the completion token, EOS last) from the prefix `tokens[b, :t]`, and has the
    children `child_token[j]` with targets `child_q[j]` for every j with `child_step[j]` equal to it.
    """

    tokens: np.ndarray  # int64 [B, max length], padded with -1
    lengths: np.ndarray  # int64 [B]
    step_offsets: np.ndarray  # int64 [B + 1]
    child_step: np.ndarray  # int64 [C]
    child_token: np.ndarray  # int64 [C]
    child_q: np.ndarray  # float64 [C]


_ARRAYS = (
    "node_parent",
    "node_token",
    "node_mass",
    "child_start",
    "child_count",
    "value_leaf",
    "value_length",
    "value_probs",
)


@dataclass(frozen=True)
class TrieSet:
    """The tries of many prompts, concatenated; prompt i owns nodes node_offsets[i]:node_offsets[i+1]."""

    ids: np.ndarray  # str [P]
    node_offsets: np.ndarray  # int64 [P + 1]
    value_offsets: np.ndarray  # int64 [P + 1]
    node_parent: np.ndarray
    node_token: np.ndarray
    node_mass: np.ndarray
    child_start: np.ndarray
    child_count: np.ndarray
    value_leaf: np.ndarray
    value_length: np.ndarray
    value_probs: np.ndarray
    metadata: dict[str, str | int] = field(default_factory=dict)  # tokenizer, decimals, max_bins

    @classmethod
    def from_tries(cls, ids: Sequence[str], tries: Iterable[Trie], **metadata: str | int) -> TrieSet:
        """Concatenate tries (any iterable, consumed once), with bounded peak memory."""
        arrays, sizes = concatenate_fields(tries, _ARRAYS)
        return cls(
            ids=np.array(ids, dtype=str),
            node_offsets=offsets(sizes["node_parent"]),
            value_offsets=offsets(sizes["value_probs"]),
            **arrays,
            metadata=metadata,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, prompt_id: str) -> int:
        return index_of(self.ids, prompt_id)

    def trie(self, i: int) -> Trie:
        """The trie of prompt i (array views, no copy)."""
        nodes = slice(self.node_offsets[i], self.node_offsets[i + 1])
        values = slice(self.value_offsets[i], self.value_offsets[i + 1])
        return Trie(**{name: getattr(self, name)[values if name.startswith("value_") else nodes] for name in _ARRAYS})

    def sample_values(self, prompt_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One value index y ~ P_Y for each entry of `prompt_index` (local to its prompt)."""
        return sample_segments(self.value_probs, self.value_offsets, prompt_index, rng)

    def path_targets(self, prompt_index: np.ndarray, value_index: np.ndarray) -> PathTargets:
        """The completion tokens and per-step child targets of one value path per example."""
        prompt_index = np.asarray(prompt_index, dtype=np.int64)
        node_base = self.node_offsets[prompt_index]
        value_pos = self.value_offsets[prompt_index] + np.asarray(value_index, dtype=np.int64)
        lengths = self.value_length[value_pos].astype(np.int64)
        batch, width = len(lengths), int(lengths.max())

        # path[b, t] = global id of the node at depth t of example b, walking up from the leaf to the root
        path = np.zeros((batch, width + 1), dtype=np.int64)
        path[np.arange(batch), lengths] = node_base + self.value_leaf[value_pos]
        for depth in range(width, 0, -1):
            below = np.flatnonzero(lengths >= depth)
            path[below, depth - 1] = node_base[below] + self.node_parent[path[below, depth]]

        in_path = np.arange(width) < lengths[:, None]
        tokens = np.where(in_path, self.node_token[path[:, 1:]], -1).astype(np.int64)
        prefixes = path[:, :-1][in_path]  # flat steps, example-major
        counts = self.child_count[prefixes].astype(np.int64)
        step_of_child = np.repeat(np.arange(len(prefixes)), counts)
        first = node_base[np.repeat(np.arange(batch), lengths)] + self.child_start[prefixes]
        rank = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        kids = np.repeat(first, counts) + rank
        return PathTargets(
            tokens=tokens,
            lengths=lengths,
            step_offsets=np.concatenate(([0], np.cumsum(lengths))),
            child_step=step_of_child,
            child_token=self.node_token[kids].astype(np.int64),
            child_q=self.node_mass[kids] / self.node_mass[prefixes][step_of_child],
        )

    def save(self, path: str | os.PathLike) -> None:
        names = ("ids", "node_offsets", "value_offsets", *_ARRAYS)
        save_npz(path, {name: getattr(self, name) for name in names}, self.metadata)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrieSet:
        arrays, metadata = load_npz(path)
        return cls(**arrays, metadata=metadata)


def trie_of_space(tokenizer, space: OutputSpace) -> Trie:
    """The trie of one output space: its strings tokenized in one batched call, then the flat arrays."""
    return build_trie(tokenize_values(tokenizer, space.values), space.probs)


def trie_set_for_spaces(tokenizer, spaces: SpaceSet) -> TrieSet:
    """The tries of every space of a SpaceSet.

    A string that several prompts share (integers, round values) is encoded once: all distinct strings
    go through the tokenizer in a few large batches, then each prompt's trie is built from its rows.
    """
    distinct, row_of_value = np.unique(spaces.values, return_inverse=True)
    tokenized = tokenize_values(tokenizer, distinct)
    tries = (
        build_trie(tokenized[row_of_value[spaces.offsets[i] : spaces.offsets[i + 1]]], spaces.space(i).probs)
        for i in tqdm(range(len(spaces)), desc="tries", unit="prompt", mininterval=2)
    )
    return TrieSet.from_tries(spaces.ids, tries, **spaces.metadata, tokenizer=tokenizer.name_or_path)
