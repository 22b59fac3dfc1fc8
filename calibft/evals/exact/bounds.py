"""Certified bounds on the exact evaluation's figures from a partial trie walk (docs/metrics.md, Adaptive exact
pass).

A walk that stopped early (`calibft.lm.trie_walk.adaptive_node_log_probs`) knows the probability of every value
whose leaf it scored (resolved values) and, for each frontier prefix, the probability of the prefix: the mass of
every value below it plus whatever leaves the space below it. Every distribution the model might have is then one
completion: each frontier prefix f puts some mass s_f in [0, m_f] on its own values, anywhere among them, and the
rest off the space. The bounds here hold over every completion:

- mass on the space: [T, T + sum m_f], T the resolved values' mass;
- W1 (the coupling of `exact_wasserstein1`): the renormalized CDF at x lies between
  L(x) = K(x) / (T + sum of m_f with values above x) and H(x) = (K(x) + sum of m_f with values at or below x) /
  (T + that sum), K(x) the resolved mass at or below x; each quantile then lies between H's and L's, and each
  term |Q(u) - F^-1(u)| between the distance of F^-1(u) to that interval and its farther end. A frontier's mass
  that may leave the space moves W1 by about its share of the mass times the distance to the rest of the law, so
  the bounds close only as the frontier's mass becomes small against T;
- KL(target || model) over the sequences: at least the KL coarse-grained over the frontier prefixes (the
  log-sum inequality), sum of t_f log(t_f / m_f) for the prefixes; no upper bound while the target has mass
  below a frontier prefix (the model may give one of its values almost nothing). On the space it adds log M,
  M in [T, T + sum m_f].

The figures reported with the bounds are those of one completion inside them: each frontier prefix's whole mass
spread over its values as the target spreads its own (evenly where the target has none there), which gives the
KL over the sequences its lower bound. With no frontier left every bound is the exact figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibft.data.trie import Trie
from calibft.evals.metrics import finite_or_none
from calibft.lm.trie_walk import PartialWalk, TreeShape

# Relative slack on the CDF envelopes: a prefix's probability and its children's come from float32 log-softmax
# terms, so the children may sum to a hair more than their prefix (about 1e-7 relative)
CDF_SLACK = 1e-6


def value_ranges(trie: Trie, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 [N] smallest and largest value below each node of `trie` (inf and -inf where none is)."""
    low, high = np.full(trie.num_nodes, np.inf), np.full(trie.num_nodes, -np.inf)
    low[trie.value_leaf], high[trie.value_leaf] = values, values
    depth, parent = TreeShape.of(trie).depth, trie.node_parent.astype(np.int64)
    for level in range(int(depth.max()), 0, -1):
        nodes = np.flatnonzero(depth == level)
        np.minimum.at(low, parent[nodes], low[nodes])
        np.maximum.at(high, parent[nodes], high[nodes])
    return low, high


@dataclass(frozen=True)
class PartialDistribution:
    """What a partial walk knows of the model's distribution on one space (see the module's docstring)."""

    values: np.ndarray  # float64 [M]
    target: np.ndarray  # float64 [M], the target's probabilities (sum 1)
    resolved: np.ndarray  # bool [M]: the values whose leaf was scored
    known: np.ndarray  # float64 [M]: the resolved values' probabilities, 0 for the others
    frontier_of: np.ndarray  # int64 [M]: the index in `frontier_*` of each unresolved value's prefix; -1 if resolved
    frontier_mass: np.ndarray  # float64 [F]: each frontier prefix's probability
    frontier_low: np.ndarray  # float64 [F]: the smallest value below it
    frontier_high: np.ndarray  # float64 [F]: the largest value below it
    frontier_target: np.ndarray  # float64 [F]: the target's mass below it

    @property
    def unresolved_mass(self) -> float:
        return float(self.frontier_mass.sum())

    def completed(self) -> np.ndarray:
        """float64 [M]: the completion whose figures are reported, each frontier prefix's mass spread over its
        values as the target's is (evenly where the target has none below it)."""
        out = self.known.copy()
        free = ~self.resolved
        f = self.frontier_of[free]
        counts = np.bincount(f, minlength=len(self.frontier_mass)).astype(np.float64)
        share = np.where(
            self.frontier_target[f] > 0, self.target[free] / np.maximum(self.frontier_target[f], 1e-300), 1 / counts[f]
        )
        out[free] = self.frontier_mass[f] * share
        return out


def mass_bounds(partial: PartialDistribution) -> tuple[float, float]:
    resolved = float(partial.known.sum())
    return resolved, min(1.0, resolved + partial.unresolved_mass)


class SpaceBounds:
    """The bounds of one prompt's figures on its space, from partial walks of its trie: what depends only on the
    trie, the values and the target law is computed once."""

    def __init__(self, trie: Trie, values: np.ndarray, quantiles: np.ndarray):
        """`quantiles`: `coupling_quantiles(law, EXACT_W1_LEVELS)` of the prompt's law, as `exact_wasserstein1`
        takes them."""
        self.trie, self.values = trie, np.asarray(values, dtype=np.float64)
        self.target = trie.value_probs / trie.value_probs.sum()
        self.low, self.high = value_ranges(trie, self.values)
        self.order = np.argsort(self.values, kind="stable")
        self.levels = (np.arange(1, len(quantiles) + 1) - 0.5) / len(quantiles)
        self.quantiles = quantiles

    def partial(self, walk: PartialWalk) -> PartialDistribution:
        """What `walk` knows of the distribution on the space."""
        trie = self.trie
        leaf_log_probs = walk.log_probs[trie.value_leaf]
        resolved = ~np.isnan(leaf_log_probs)
        frontier = walk.frontier(trie)
        # each unresolved value's deepest scored ancestor is its frontier prefix: climb from the leaf
        index = np.full(trie.num_nodes, -1, dtype=np.int64)
        index[frontier] = np.arange(len(frontier))
        node = trie.value_leaf.astype(np.int64)
        frontier_of = np.where(resolved, -1, index[node])
        climbing = np.flatnonzero(~resolved)
        while len(climbing := climbing[frontier_of[climbing] < 0]):
            node[climbing] = trie.node_parent[node[climbing]]
            frontier_of[climbing] = index[node[climbing]]
        return PartialDistribution(
            values=self.values,
            target=self.target,
            resolved=resolved,
            known=np.exp(np.where(resolved, leaf_log_probs, -np.inf)),
            frontier_of=frontier_of,
            frontier_mass=np.exp(walk.log_probs[frontier]),
            frontier_low=self.low[frontier],
            frontier_high=self.high[frontier],
            frontier_target=np.bincount(frontier_of[~resolved], self.target[~resolved], len(frontier)),
        )

    def w1(self, partial: PartialDistribution) -> tuple[float, float]:
        """Lowest and highest W1 (`exact_wasserstein1`'s coupling) between the law and any completion
        renormalized on the space; (0, inf) while no value with mass is resolved."""
        values = self.values[self.order]
        resolved_below = np.cumsum(partial.known[self.order])
        total = resolved_below[-1]
        if not total > 0:
            return 0.0, math.inf

        def frontier_mass_at_or_below(ends: np.ndarray) -> np.ndarray:
            by_end = np.argsort(ends, kind="stable")
            cumulative = np.concatenate([[0.0], np.cumsum(partial.frontier_mass[by_end])])
            return cumulative[np.searchsorted(ends[by_end], values, side="right")]

        reachable = frontier_mass_at_or_below(partial.frontier_low)  # prefixes with a value at or below x
        above = partial.unresolved_mass - frontier_mass_at_or_below(partial.frontier_high)  # with one above x
        upper_cdf = np.maximum.accumulate((resolved_below + reachable) / (total + reachable)) * (1 + CDF_SLACK)
        lower_cdf = np.maximum.accumulate(resolved_below / (total + np.maximum(above, 0.0))) * (1 - CDF_SLACK)
        last = len(values) - 1
        smallest = values[np.minimum(np.searchsorted(upper_cdf, self.levels, side="left"), last)]
        largest = values[np.minimum(np.searchsorted(lower_cdf, self.levels, side="left"), last)]
        with np.errstate(over="ignore", invalid="ignore"):
            nearest = np.maximum(0.0, np.maximum(smallest - self.quantiles, self.quantiles - largest))
            farthest = np.maximum(np.abs(smallest - self.quantiles), np.abs(largest - self.quantiles))
            return float(np.mean(nearest)), float(np.mean(farthest))


def kl_bounds(partial: PartialDistribution) -> dict[str, tuple[float, float]]:
    """KL(target || model) over the sequences and on the space, lowest and highest over the completions (inf
    where unbounded)."""
    target, known = partial.target, partial.known
    held = partial.resolved & (target > 0)
    coarse = partial.frontier_target > 0
    below, mass = partial.frontier_target[coarse], partial.frontier_mass[coarse]
    with np.errstate(divide="ignore"):
        resolved_terms = float(np.sum(target[held] * (np.log(target[held]) - np.log(known[held]))))
        frontier_terms = float(np.sum(below * (np.log(below) - np.log(mass))))
    sequences_low = resolved_terms + frontier_terms
    sequences_high = sequences_low if not coarse.any() else math.inf
    low_mass, high_mass = mass_bounds(partial)
    on_space_low = max(0.0, sequences_low + math.log(low_mass)) if low_mass > 0 else 0.0
    on_space_high = sequences_high + math.log(high_mass) if high_mass > 0 else math.inf
    return {"sequences": (sequences_low, sequences_high), "on_space": (on_space_low, on_space_high)}


@dataclass(frozen=True)
class Tolerance:
    """When an adaptive walk may stop: the width of the normalized W1's bounds (W1 over the law's Q95 - Q05) and
    of the mass's. Zero: walk the whole trie."""

    w1_norm: float
    mass: float

    @property
    def full_walk(self) -> bool:
        return self.w1_norm == 0 or self.mass == 0

    def met(self, bounds: SpaceBounds, partial: PartialDistribution, scale: float) -> bool:
        low_mass, high_mass = mass_bounds(partial)
        if high_mass - low_mass > self.mass:
            return False
        low, high = bounds.w1(partial)
        return high - low <= self.w1_norm * scale


def figure_bounds(bounds: SpaceBounds, partial: PartialDistribution) -> dict[str, list[float | None]]:
    """[lowest, highest] of the mass on the space, W1 and both KLs over the completions, for metrics.json (None
    where a side is unbounded)."""
    kl = kl_bounds(partial)
    pairs = {"mass": mass_bounds(partial), "w1": bounds.w1(partial), **{f"kl_{k}": v for k, v in kl.items()}}
    return {name: [finite_or_none(low), finite_or_none(high)] for name, (low, high) in pairs.items()}
