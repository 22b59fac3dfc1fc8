"""Canonical output spaces: the finite set of numeric strings a prompt may answer, with their masses.

See docs/method.md, Canonical output spaces. The continuous case never materializes the full decimal grid: the
kept grid points are `k_lo + linspace(0, n-1, B, dtype=int)`, which is what indexing the full grid would give.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from calibft.core.io import load_npz, save_npz
from calibft.core.ragged import choose_segments, concatenate_fields, index_of, offsets, sample_segments

if TYPE_CHECKING:
    from calibft.data.families import UnfrozenLaw
    from calibft.data.grid import Prompt

QUANTILE_RANGE = (0.001, 0.999)
FALLBACK_RANGE = (-10.0, 10.0)
MAX_DECIMALS = 8


@dataclass(frozen=True)
class OutputSpace:
    """Canonical strings in increasing numeric order and their probabilities (summing to 1)."""

    values: np.ndarray  # dtype bytes_ ('S'), ASCII
    probs: np.ndarray  # float64

    def strings(self) -> list[str]:
        return [v.decode() for v in self.values.tolist()]


def check_space_settings(decimals: int, max_bins: int) -> None:
    if not (isinstance(decimals, int) and 0 <= decimals <= MAX_DECIMALS):
        raise ValueError(f"decimals must be an integer in 0..{MAX_DECIMALS}, got {decimals!r}")
    if not (isinstance(max_bins, int) and max_bins >= 2):
        raise ValueError(f"max_bins must be an integer of at least 2, got {max_bins!r}")


def build_output_space(family_id: str, params: Mapping[str, float], decimals: int, max_bins: int) -> OutputSpace:
    """The canonical output space of one prompt (docs/method.md, Canonical output spaces)."""
    # imported here: the families import scipy.stats (about 1 s), which the jobs that only load spaces
    # (tries, training) do not need
    from calibft.data.families import family

    check_space_settings(decimals, max_bins)
    fam = family(family_id)
    law = fam.unfrozen_law(params)
    support = fam.support(params)
    if fam.integer:
        return _integer_space(law, support, max_bins)
    return _continuous_space(law, support, decimals, max_bins)


def _continuous_space(law: UnfrozenLaw, support: tuple[float, float], decimals: int, max_bins: int) -> OutputSpace:
    lower = max(float(law.ppf(QUANTILE_RANGE[0])), support[0])
    upper = min(float(law.ppf(QUANTILE_RANGE[1])), support[1])
    if not (math.isfinite(lower) and math.isfinite(upper)) or lower >= upper:
        lower, upper = FALLBACK_RANGE
    step = 10**-decimals
    k_lo, k_hi = math.ceil(lower / step), math.floor(upper / step)
    n = k_hi - k_lo + 1
    if n <= 0:  # no grid point inside [lower, upper]: one value at the rounded midpoint takes all mass
        center = round((lower + upper) / 2, decimals)
        return OutputSpace(np.array([f"{center:.{decimals}f}"], dtype=np.bytes_), np.ones(1))
    if n > max_bins:
        ks = k_lo + np.linspace(0, n - 1, max_bins, dtype=np.int64)
    else:
        ks = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    centers = ks * step
    edges = np.concatenate(([lower], (centers[:-1] + centers[1:]) / 2, [upper]))
    cdf = law.cdf(edges)
    masses = np.diff(cdf)
    masses[0] += cdf[0]
    masses[-1] += 1.0 - cdf[-1]
    # Distinct grid integers give distinct strings, so the reference's duplicate merge never fires.
    return OutputSpace(format_grid(ks, decimals), _normalize(masses))


def _integer_space(law: UnfrozenLaw, support: tuple[float, float], max_bins: int) -> OutputSpace:
    lo = math.floor(support[0]) if math.isfinite(support[0]) else math.floor(law.ppf(QUANTILE_RANGE[0]))
    hi = math.ceil(support[1]) if math.isfinite(support[1]) else math.ceil(law.ppf(QUANTILE_RANGE[1]))
    ks = np.arange(lo, hi + 1, dtype=np.int64)[:max_bins]
    masses = law.pmf(ks)
    if not math.isfinite(support[1]):
        masses[-1] += 1.0 - law.cdf(ks[-1])
    return OutputSpace(format_grid(ks, 0), _normalize(masses))


def _normalize(masses: np.ndarray) -> np.ndarray:
    """Clip the round-off negatives of CDF differences, then rescale to sum 1."""
    masses = np.clip(masses, 0.0, None)
    return masses / masses.sum()


def format_grid(ks: np.ndarray, decimals: int) -> np.ndarray:
    """`f"{k * 10**-decimals:.{decimals}f}"` for every grid integer k, vectorized, as ASCII bytes.

    The float k * 10**-d lies within a few ulps of k / 10**d, far closer than the half unit that would
    change its rounding at d decimals (for |k| < 1e15): the string is k's digits with a point inserted.
    Rows are laid out right-aligned in a character matrix, then shifted left by their padding.
    """
    magnitude = np.abs(ks)
    width = max(decimals + 1, len(str(int(magnitude.max()))))  # digits, with leading zeros
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    digits = (magnitude[:, None] // powers % 10 + ord("0")).astype(np.uint8)
    whole_width = width - decimals
    columns = [np.zeros((len(ks), 1), np.uint8), digits[:, :whole_width]]
    if decimals:
        columns += [np.full((len(ks), 1), ord("."), np.uint8), digits[:, whole_width:]]
    chars = np.concatenate(columns, axis=1)
    significant = np.maximum((magnitude[:, None] >= powers[::-1]).sum(axis=1), 1)
    # the sign goes just left of the first whole digit kept; everything left of it is dropped
    sign_column = whole_width - np.maximum(significant - decimals, 1)
    negative = np.flatnonzero(ks < 0)
    chars[negative, sign_column[negative]] = ord("-")
    skip = sign_column + (ks >= 0)
    out = np.zeros_like(chars)
    for shift in np.unique(skip):
        rows = skip == shift
        out[rows, : chars.shape[1] - shift] = chars[rows, shift:]
    return out.view(f"S{chars.shape[1]}").ravel()


def spaces_for_prompts(prompts: Sequence[Prompt], decimals: int, max_bins: int, threads: int = 1) -> list[OutputSpace]:
    """The output spaces of many prompts, in order, over `threads` processes."""
    return list(iter_spaces(prompts, decimals, max_bins, threads))


def iter_spaces(prompts: Sequence[Prompt], decimals: int, max_bins: int, threads: int = 1) -> Iterator[OutputSpace]:
    """The output spaces of many prompts as they are built, in order, over `threads` processes."""
    check_space_settings(decimals, max_bins)
    build = partial(_space_of_prompt, decimals=decimals, max_bins=max_bins)
    progress = partial(tqdm, total=len(prompts), desc="output spaces", unit="prompt", mininterval=2)
    if threads <= 1:
        yield from progress(map(build, prompts))
        return
    with ProcessPoolExecutor(threads) as pool:
        yield from progress(pool.map(build, prompts, chunksize=64))


def _space_of_prompt(prompt: Prompt, decimals: int, max_bins: int) -> OutputSpace:
    return build_output_space(prompt.family, prompt.params, decimals, max_bins)


@dataclass(frozen=True)
class SpaceSet:
    """The output spaces of many prompts, concatenated; prompt i owns values offsets[i]:offsets[i+1]."""

    ids: np.ndarray  # str [P]
    offsets: np.ndarray  # int64 [P + 1]
    values: np.ndarray  # bytes [V]
    probs: np.ndarray  # float64 [V]
    metadata: dict[str, str | int] = field(default_factory=dict)  # decimals, max_bins

    @classmethod
    def from_spaces(cls, ids: Sequence[str], spaces: Iterable[OutputSpace], **metadata: str | int) -> SpaceSet:
        """Concatenate spaces (any iterable, consumed once), with bounded peak memory."""
        arrays, sizes = concatenate_fields(spaces, ("values", "probs"))
        return cls(ids=np.array(ids, dtype=str), offsets=offsets(sizes["probs"]), **arrays, metadata=metadata)

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, prompt_id: str) -> int:
        return index_of(self.ids, prompt_id)

    def space(self, i: int) -> OutputSpace:
        part = slice(self.offsets[i], self.offsets[i + 1])
        return OutputSpace(self.values[part], self.probs[part])

    def sample_values(self, prompt_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One value index y ~ P_Y for each entry of `prompt_index` (local to its prompt)."""
        return sample_segments(self.probs, self.offsets, prompt_index, rng)

    def choose_values(self, prompt_index: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        """One value index y ~ P_Y for each entry of `prompt_index`, each with numpy's `choice` from
        `default_rng(seeds[b])` (the authors' release's training draw)."""
        return choose_segments(self.probs, self.offsets, prompt_index, seeds)

    def save(self, path: str | os.PathLike) -> None:
        arrays = {"ids": self.ids, "offsets": self.offsets, "values": self.values, "probs": self.probs}
        save_npz(path, arrays, self.metadata)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SpaceSet:
        arrays, metadata = load_npz(path, required=("ids", "offsets", "values", "probs"))
        return cls(**arrays, metadata=metadata)
