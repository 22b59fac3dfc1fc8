"""Ragged collections: the variable-length records of many prompts kept concatenated, with offsets."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def offsets(sizes: list[int]) -> np.ndarray:
    """[0, s0, s0 + s1, ...]: record i owns the slice offsets[i]:offsets[i + 1]."""
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def concatenate_fields(records: Iterable, names: tuple[str, ...]) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """Concatenate the array fields `names` of every record (an iterable consumed once).

    Returns the concatenated arrays and each field's per-record sizes. The pieces of a field are released
    as soon as it is concatenated, so the peak stays near one copy of the data plus one field.
    """
    pieces: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for record in records:
        for name in names:
            pieces[name].append(getattr(record, name))
    sizes = {name: [len(piece) for piece in pieces[name]] for name in names}
    return {name: np.concatenate(pieces.pop(name)) for name in names}, sizes


def index_of(ids: np.ndarray, record_id: str) -> int:
    """The position of `record_id` in `ids`; a KeyError that shows what ids look like otherwise."""
    hits = np.flatnonzero(ids == record_id)
    if len(hits) == 0:
        example = f"; ids look like {ids[0]!r}" if len(ids) else ""
        raise KeyError(f"no prompt with id {record_id!r}{example}")
    return int(hits[0])
