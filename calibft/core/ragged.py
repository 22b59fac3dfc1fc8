"""Ragged collections: the variable-length records of many prompts kept concatenated, with offsets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def offsets(sizes: list[int]) -> np.ndarray:
    """[0, s0, s0 + s1, ...]: record i owns the slice offsets[i]:offsets[i + 1]."""
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def concatenate_fields(
    records: Iterable, names: tuple[str, ...], block: int = 256
) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """Concatenate the array fields `names` of every record (an iterable consumed once).

    Returns the concatenated arrays and each field's per-record sizes. Records are first gathered into
    blocks of `block`, so the many small pieces are freed (and their memory reused) as they come; the
    blocks of a field are released as soon as the field is concatenated. The peak stays near one copy.
    """
    blocks: dict[str, list[np.ndarray]] = {name: [] for name in names}
    pending: dict[str, list[np.ndarray]] = {name: [] for name in names}
    sizes: dict[str, list[int]] = {name: [] for name in names}

    def flush() -> None:
        for name in names:
            if pending[name]:
                blocks[name].append(np.concatenate(pending[name]))
                pending[name].clear()

    for record in records:
        for name in names:
            piece = getattr(record, name)
            pending[name].append(piece)
            sizes[name].append(len(piece))
        if len(pending[names[0]]) == block:
            flush()
    flush()
    return {name: np.concatenate(blocks.pop(name)) for name in names}, sizes


def index_of(ids: np.ndarray, record_id: str) -> int:
    """The position of `record_id` in `ids`; a KeyError that shows what ids look like otherwise."""
    hits = np.flatnonzero(ids == record_id)
    if len(hits) == 0:
        example = f"; ids look like {ids[0]!r}" if len(ids) else ""
        raise KeyError(f"no prompt with id {record_id!r}{example}")
    return int(hits[0])


def choose_segments(probs: np.ndarray, offsets: np.ndarray, segments: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
    """One draw per entry of `segments`, each from a generator of its own: `default_rng(seeds[b]).choice` over
    segment s (local index) with the segment's probs, as the authors' release draws a training answer."""
    picks = [
        np.random.default_rng(int(seed)).choice(offsets[s + 1] - offsets[s], p=probs[offsets[s] : offsets[s + 1]])
        for s, seed in zip(segments, seeds, strict=True)
    ]
    return np.array(picks, dtype=np.int64)


def sample_segments(probs: np.ndarray, offsets: np.ndarray, segments: np.ndarray, rng: np.random.Generator):
    """One draw per entry of `segments`: an index into segment s (local to it) with the segment's probs."""
    uniforms = rng.random(len(segments))
    picks = np.empty(len(segments), dtype=np.int64)
    for b, (s, u) in enumerate(zip(segments, uniforms, strict=True)):
        cdf = np.cumsum(probs[offsets[s] : offsets[s + 1]])
        picks[b] = min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1)
    return picks
