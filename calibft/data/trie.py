"""Token tries over canonical output spaces, stored as flat arrays (docs/method.md, Token tries and soft targets).

Every canonical string is tokenized alone (no special tokens) and the tokenizer's EOS is appended. Node 0
is the empty prefix; the nodes of depth t+1 are numbered after those of depth t, sorted by (parent, token),
so the children of every node are one contiguous run `child_start[p] : child_start[p] + child_count[p]`.
The target at prefix p is q(child | p) = mass[child] / mass[p].

A `TrieSet` keeps the tries of many prompts concatenated (node and value indices local to each prompt,
with per-prompt offsets) and is saved as one `.npz` file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Encoding
from tqdm import tqdm

from calibft.core.io import load_npz, save_npz
from calibft.core.ragged import choose_segments, index_of, offsets, sample_segments
from calibft.data.output_space import OutputSpace, SpaceSet


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

    Where the tokenizer gives each character of these strings a token of its own (Qwen3's, the tiny
    model's), a table of one token per character replaces it (`_encode_by_character`, for inputs of at
    least `_BY_CHARACTER_MIN` strings). Otherwise each distinct string is encoded once, and batched
    calls of `chunk` strings keep the tokenizer's own buffers small. A Rust ("fast") tokenizer
    encodes each batch on every core, 256 strings to a text (`_encode_joined`) unless a batch shows that
    its pieces are not independent; then it, and a tokenizer without a Rust backend, encode one string
    at a time (`_encode_each`).
    """
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no EOS token; a trie needs one to end every value")
    values = np.asarray(values)
    if len(values) >= _BY_CHARACTER_MIN and (by_character := _encode_by_character(tokenizer, values)) is not None:
        return by_character
    # a string that several prompts share (integers, round values) goes through the tokenizer once
    distinct, row_of_value = np.unique(values, return_inverse=True)
    joined = getattr(tokenizer, "backend_tokenizer", None) is not None
    ids, lengths = [], []
    for start in range(0, len(distinct), chunk):
        batch = distinct[start : start + chunk]
        strings = (np.strings.decode(batch, "ascii") if batch.dtype.kind == "S" else batch).tolist()
        encoded = _encode_joined(tokenizer, strings) if joined else None
        if encoded is None:
            joined = False  # this tokenizer's pieces depend on each other: no use joining the next batches
            encoded = _encode_each(tokenizer, strings)
        ids.append(encoded[0])
        lengths.append(encoded[1])
    lengths = np.concatenate(lengths)
    return TokenizedValues(_pad(np.concatenate(ids), lengths), lengths)[row_of_value]


# below this many strings the check of `_encode_by_character` costs more than the table saves
_BY_CHARACTER_MIN = 4096
# canonical numbers use 12 characters; strings of more kinds of characters are left to the tokenizer
_BY_CHARACTER_ALPHABET = 16
# strings of the input whose encoding `_encode_by_character` checks, besides their runs of two and three characters
_BY_CHARACTER_CHECKED = 1024


def _encode_by_character(tokenizer, values: np.ndarray) -> TokenizedValues | None:
    """Every string as one token per character, EOS appended; None unless the tokenizer encodes them so.

    A tokenizer that gives every digit a pre-token piece of its own (Qwen3's, the tiny model's) encodes a
    canonical string as one token per character: the sign, each digit, the point. A lookup table over the
    strings' bytes then replaces the tokenizer, which spends about 10 µs on each string. The table holds
    when the tokenizer encodes, each alone: every character of the strings' alphabet as one token; every
    run of two and of three characters found inside the strings as their tokens in a row (a merge of two
    characters, a pre-tokenizer that keeps runs of digits together as Llama-3's does, or a prefix that a
    Metaspace adds to a text's first piece shows there); and a spread of the strings themselves. Runs that
    no string holds ("--", "..") are not asked: a tokenizer may well merge them.
    """
    if values.dtype.kind == "U":
        try:
            values = np.strings.encode(values, "ascii")
        except UnicodeEncodeError:
            return None
    if values.dtype.kind != "S":
        return None
    present = np.zeros(256, dtype=bool)
    for chunk in _row_chunks(_bytes_of(values)):
        present |= np.bincount(chunk.ravel(), minlength=256) > 0
    alphabet = np.flatnonzero(present[1:]) + 1  # NUL pads the shorter strings of an "S" array
    if not 0 < len(alphabet) <= _BY_CHARACTER_ALPHABET or alphabet.max() >= 128:
        return None
    characters = [chr(c) for c in alphabet]
    ids, lengths = _encode_each(tokenizer, characters)
    if np.any(lengths != 2):
        return None
    table = np.full(256, -1, dtype=np.int32)
    table[alphabet] = ids[0::2]
    spread = np.unique(np.linspace(0, len(values) - 1, _BY_CHARACTER_CHECKED).astype(np.int64))
    checked = _runs_of_two_and_three(values, alphabet) + np.strings.decode(values[spread], "ascii").tolist()
    ids, lengths = _encode_each(tokenizer, checked)
    expected = _look_up(table, np.array(checked, dtype="S"), tokenizer.eos_token_id)
    if expected is None or not np.array_equal(lengths, expected.lengths):
        return None
    if not np.array_equal(ids, expected.tokens[expected.tokens >= 0]):
        return None
    return _look_up(table, values, tokenizer.eos_token_id)


def _runs_of_two_and_three(values: np.ndarray, alphabet: np.ndarray) -> list[str]:
    """Every distinct run of two and of three characters inside the strings of an "S" array whose bytes,
    NUL padding aside, all lie in `alphabet`."""
    pad = len(alphabet)  # the characters are digits 0..pad-1 of a number in base pad+1; the padding is pad
    digit = np.full(256, pad, dtype=np.uint16)  # codes below (pad+1)**3 <= 17**3
    digit[alphabet] = np.arange(pad)
    seen = np.zeros((pad + 1) ** 3, dtype=bool)
    for chunk in _row_chunks(_bytes_of(values)):
        # two more padding columns: every run of two then starts a run of three
        digits = np.pad(digit[chunk], ((0, 0), (0, 2)), constant_values=pad)
        seen[((digits[:, :-2] * (pad + 1) + digits[:, 1:-1]) * (pad + 1) + digits[:, 2:]).ravel()] = True
    runs = np.flatnonzero(seen)[:, None] // (pad + 1) ** np.arange(2, -1, -1) % (pad + 1)
    twos = np.unique(runs[(runs[:, :2] < pad).all(axis=1), :2], axis=0)
    threes = runs[(runs < pad).all(axis=1)]
    return ["".join(map(chr, alphabet[run])) for runs_of_one_length in (twos, threes) for run in runs_of_one_length]


# rows of a large array handled at a time, so that temporaries stay small
_CHUNK_ROWS = 1 << 18


def _row_chunks(array: np.ndarray):
    return (array[start : start + _CHUNK_ROWS] for start in range(0, len(array), _CHUNK_ROWS))


def _bytes_of(values: np.ndarray) -> np.ndarray:
    """The bytes of an "S" array as a [strings, itemsize] uint8 matrix (a view where it can be)."""
    return np.ascontiguousarray(values).view(np.uint8).reshape(len(values), values.dtype.itemsize)


def _look_up(table: np.ndarray, values: np.ndarray, eos: int) -> TokenizedValues | None:
    """The tokens of an "S" array of strings, one per byte from `table`, EOS appended; None if a string
    holds a byte that `table` lacks (-1), such as a NUL inside it."""
    lengths = np.strings.str_len(values).astype(np.int64)
    tokens = np.empty((len(values), values.dtype.itemsize + 1), dtype=np.int32)
    chunks = zip(_row_chunks(tokens), _row_chunks(_bytes_of(values)), _row_chunks(lengths), strict=True)
    for rows, chars, length in chunks:
        rows[:, :-1] = table[chars]  # the NULs that pad shorter strings look up -1, the padding of TokenizedValues
        if np.count_nonzero(rows[:, :-1] >= 0) != length.sum():
            return None
    tokens[:, -1] = -1
    tokens[np.arange(len(values)), lengths] = eos
    return TokenizedValues(tokens[:, : int(lengths.max()) + 1], lengths + 1)


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
    """The trie of tokenized values with masses `probs`."""
    return Trie(**_build_group_tries(values, np.asarray(probs, dtype=np.float64), np.array([0, len(probs)]))[1])


# values per call of `_build_group_tries`: its arrays stay in the CPU's cache, its temporaries stay small
_BUILT_TOGETHER = 65536


def build_trie_parts(
    values: TokenizedValues, probs: np.ndarray, value_offsets: np.ndarray
) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The tries of consecutive groups of values (group i owns rows value_offsets[i]:value_offsets[i+1]),
    built `_BUILT_TOGETHER` values at a time (whole groups): for each part, its node_offsets and the
    arrays of `Trie` concatenated (indices local to each group). `TrieSet.from_parts` joins them; the
    values can be freed in between.
    """
    probs = np.asarray(probs, dtype=np.float64)
    value_offsets = np.asarray(value_offsets, dtype=np.int64)
    cuts = np.searchsorted(value_offsets, np.arange(0, value_offsets[-1], _BUILT_TOGETHER), side="right") - 1
    cuts = np.unique(np.append(cuts, len(value_offsets) - 1))
    parts = []
    with tqdm(total=int(value_offsets[-1]), desc="tries", unit="value", unit_scale=True, mininterval=2) as progress:
        for first, last in itertools.pairwise(cuts.tolist()):
            rows = slice(value_offsets[first], value_offsets[last])
            parts.append(_build_group_tries(values[rows], probs[rows], value_offsets[first : last + 1] - rows.start))
            progress.update(rows.stop - rows.start)
    return parts


def _build_group_tries(
    values: TokenizedValues, probs: np.ndarray, value_offsets: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The tries of some groups (as `build_trie_parts`), all at once.

    The rows are sorted once by (group, first token, second token, ...). Then the rows that share a
    prefix are contiguous, so each depth's nodes come from one scan: a node starts wherever a row's
    prefix differs from the row before, and the nodes come out by group, then (parent, token). A second
    pass numbers them within their group's trie, depth after depth, and writes the flat arrays.
    """
    groups = len(value_offsets) - 1
    group_of_row = np.repeat(np.arange(groups), np.diff(value_offsets))
    order = _lexicographic_order(values.tokens, group_of_row)
    columns = np.ascontiguousarray(values.tokens[order].T)  # one contiguous row per depth
    lengths, row_group, row_probs = values.lengths[order], group_of_row[order], probs[order]

    # pass 1: the nodes of each level (level 0 the roots, level d the prefixes of d tokens) in row order
    levels = [(np.arange(groups), np.full(groups, -1), np.full(groups, -1), np.bincount(group_of_row, probs, groups))]
    node = row_group.copy()  # each row's node, as an index into the last level
    for depth in range(int(lengths.max())):
        rows = np.flatnonzero(lengths > depth)
        parent, token = node[rows], columns[depth, rows]
        starts = np.ones(len(rows), dtype=bool)
        starts[1:] = (parent[1:] != parent[:-1]) | (token[1:] != token[:-1])
        index = np.cumsum(starts) - 1
        node[rows] = index
        levels.append((row_group[rows[starts]], parent[starts], token[starts], np.bincount(index, row_probs[rows])))

    # pass 2: number each group's nodes level after level, and write the arrays at those numbers
    counts = np.stack([np.bincount(level[0], minlength=groups) for level in levels])  # [level, group]
    node_offsets = offsets(counts.sum(axis=0))
    level_start = np.cumsum(counts, axis=0) - counts  # where a level begins in its group's trie
    group_first = np.cumsum(counts, axis=1) - counts  # where a group begins in a level
    num_nodes = int(node_offsets[-1])
    node_parent, node_token = np.empty(num_nodes, np.int32), np.empty(num_nodes, np.int32)
    node_mass = np.empty(num_nodes)
    child_start, child_count = np.zeros(num_nodes, np.int32), np.zeros(num_nodes, np.int32)
    value_leaf = np.empty(len(probs), np.int32)
    above, above_at = None, None  # the local numbers and flat positions of the previous level's nodes
    for level, (group, parent, token, mass) in enumerate(levels):
        local = np.arange(len(group)) - group_first[level, group] + level_start[level, group]
        at = node_offsets[group] + local
        node_token[at], node_mass[at] = token, mass
        if above is None:
            node_parent[at] = -1
        else:
            node_parent[at] = above[parent]
            # the parents are non-decreasing, so each node's children are one run of this level
            first_kids = np.flatnonzero(np.concatenate(([True], parent[1:] != parent[:-1])))
            child_start[above_at[parent[first_kids]]] = local[first_kids]
            child_count[above_at[parent[first_kids]]] = np.diff(first_kids, append=len(parent))
        ends_here = np.flatnonzero(lengths == level)
        value_leaf[order[ends_here]] = local[node[ends_here]]
        above, above_at = local, at
    return node_offsets, {
        "node_parent": node_parent,
        "node_token": node_token,
        "node_mass": node_mass,
        "child_start": child_start,
        "child_count": child_count,
        "value_leaf": value_leaf,
        "value_length": values.lengths.astype(np.int32),
        "value_probs": probs,
    }


def _lexicographic_order(tokens: np.ndarray, group_of_row: np.ndarray) -> np.ndarray:
    """The permutation that sorts rows by (group, then their tokens in order; the -1 padding first).

    Tokens are replaced by their rank among the ids present, so that a row packs into one or a few
    64-bit keys (eleven digits of 4 bits and the group fit in one), which one sort orders.
    """
    present = np.bincount(tokens.ravel() + 1) > 0
    rank = (np.cumsum(present) - 1).astype(np.uint64)  # the rank of id t sits at t + 1, the padding's at 0
    bits = max(int(rank[-1]).bit_length(), 1)
    free = 64 - max(int(group_of_row[-1]).bit_length(), 1)
    key, keys = group_of_row.astype(np.uint64) << np.uint64(free), []
    for column in tokens.T:
        if free < bits:
            keys.append(key)
            key, free = np.zeros(len(tokens), dtype=np.uint64), 64
        free -= bits
        key |= rank[column + 1] << np.uint64(free)
    keys.append(key)
    return np.argsort(key) if len(keys) == 1 else np.lexsort(keys[::-1])


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
    def from_parts(
        cls,
        ids: Sequence[str],
        value_offsets: np.ndarray,
        parts: list[tuple[np.ndarray, dict[str, np.ndarray]]],
        **metadata: str | int,
    ) -> TrieSet:
        """Join the parts that `build_trie_parts` made of these values (emptied as they are joined)."""
        return cls(
            ids=np.array(ids, dtype=str),
            node_offsets=offsets(np.concatenate([np.diff(part_offsets) for part_offsets, _ in parts])),
            value_offsets=np.asarray(value_offsets, dtype=np.int64),
            **{name: np.concatenate([arrays.pop(name) for _, arrays in parts]) for name in _ARRAYS},
            metadata=metadata,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, prompt_id: str) -> int:
        return index_of(self.ids, prompt_id)

    def subset(self, prompt_ids: Sequence[str]) -> TrieSet:
        """The tries of these prompts, in this order (copies)."""
        rows = [self.index(prompt_id) for prompt_id in prompt_ids]
        tries = [self.trie(i) for i in rows]
        return TrieSet(
            ids=self.ids[rows],
            node_offsets=offsets([trie.num_nodes for trie in tries]),
            value_offsets=offsets([len(trie.value_leaf) for trie in tries]),
            **{name: np.concatenate([getattr(trie, name) for trie in tries]) for name in _ARRAYS},
            metadata=dict(self.metadata),
        )

    def trie(self, i: int) -> Trie:
        """The trie of prompt i (array views, no copy)."""
        nodes = slice(self.node_offsets[i], self.node_offsets[i + 1])
        values = slice(self.value_offsets[i], self.value_offsets[i + 1])
        return Trie(**{name: getattr(self, name)[values if name.startswith("value_") else nodes] for name in _ARRAYS})

    def sample_values(self, prompt_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One value index y ~ P_Y for each entry of `prompt_index` (local to its prompt)."""
        return sample_segments(self.value_probs, self.value_offsets, prompt_index, rng)

    def choose_values(self, prompt_index: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        """One value index y ~ P_Y for each entry of `prompt_index`, each with numpy's `choice` from
        `default_rng(seeds[b])` (the authors' release's training draw)."""
        return choose_segments(self.value_probs, self.value_offsets, prompt_index, seeds)

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
        arrays, metadata = load_npz(path, required=("ids", "node_offsets", "value_offsets", *_ARRAYS))
        return cls(**arrays, metadata=metadata)


def trie_of_space(tokenizer, space: OutputSpace) -> Trie:
    """The trie of one output space: its strings tokenized in one batched call, then the flat arrays."""
    return build_trie(tokenize_values(tokenizer, space.values), space.probs)


def trie_set_for_spaces(tokenizer, spaces: SpaceSet) -> TrieSet:
    """The tries of every space of a SpaceSet.

    All strings are tokenized in one call (`tokenize_values` encodes a string that several prompts share
    once), then the tries are built in parts, which are joined once the tokens are freed.
    """
    parts = build_trie_parts(tokenize_values(tokenizer, spaces.values), spaces.probs, spaces.offsets)
    return TrieSet.from_parts(spaces.ids, spaces.offsets, parts, **spaces.metadata, tokenizer=tokenizer.name_or_path)
