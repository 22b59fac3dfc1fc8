"""The certified bounds of a partial trie walk contain the full walk's figures: random spaces (digits one to a
token or grouped), random next-token distributions that send any share of a prefix's mass off the space, and
random partial walks; with nothing left to expand they are the figures themselves; and the adaptive walk on a
model meets its tolerance with part of the trie where the model keeps its mass on the space."""

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import Qwen3ForCausalLM

from calibft.data.trie import TokenizedValues, build_trie
from calibft.demo.tiny_model import TinyModelSettings, tiny_config
from calibft.evals.exact.bounds import SpaceBounds, Tolerance, figure_bounds, kl_bounds, mass_bounds, value_ranges
from calibft.evals.metrics import EXACT_W1_LEVELS, coupling_quantiles, exact_kl, exact_wasserstein1, w1_scale
from calibft.lm.generation import SamplingSettings, sample
from calibft.lm.trie_walk import NextToken, PartialWalk, adaptive_node_log_probs, node_log_probs

EOS = 0


def _space(rng: np.random.Generator, group: int):
    """Distinct values with 0 to 3 decimals written canonically, tokenized with digits `group` to a token, the
    trie with random target masses, and the values."""
    decimals = int(rng.integers(0, 4))
    raw = np.round(rng.normal(rng.uniform(-3, 3), rng.uniform(0.2, 4), int(rng.integers(4, 120))), decimals)
    strings = sorted({np.format_float_positional(v, trim="-") for v in raw})
    vocab: dict[str, int] = {}

    def tokens(text: str) -> list[int]:
        pieces, i = [], 0
        while i < len(text):
            end = i + 1
            while text[i].isdigit() and end < len(text) and end - i < group and text[end].isdigit():
                end += 1
            pieces.append(vocab.setdefault(text[i:end], len(vocab) + 1))
            i = end
        return [*pieces, EOS]

    values = TokenizedValues.from_lists([tokens(s) for s in strings])
    target = rng.dirichlet(np.full(len(strings), rng.uniform(0.3, 3)))
    return build_trie(values, target), np.array([float(s) for s in strings])


def _model(rng: np.random.Generator, trie) -> np.ndarray:
    """float64 [N] node log-probabilities: at each internal node a random distribution over its children and
    one share for every token off the trie, from nearly nothing to nearly everything."""
    log_probs = np.zeros(trie.num_nodes)
    off = rng.uniform(0, 1) ** 3
    for node in np.flatnonzero(trie.child_count > 0):  # parents come before their children
        kids = np.arange(trie.child_start[node], trie.child_start[node] + trie.child_count[node])
        shares = rng.dirichlet(np.full(len(kids) + 1, rng.uniform(0.2, 2)))
        shares[-1] = max(shares[-1], off)
        log_probs[kids] = log_probs[node] + np.log(shares[:-1] / shares.sum())
    return log_probs


def _partial(rng: np.random.Generator, trie, log_probs: np.ndarray, keep: float) -> PartialWalk:
    """A walk that expanded the root and each internal node whose parent it expanded with probability `keep`
    (for one `rng` state, a larger `keep` expands a superset)."""
    walk, draws = PartialWalk.start(trie), rng.uniform(size=trie.num_nodes)
    for node in np.flatnonzero(trie.child_count > 0):
        if node == 0 or (walk.expanded[trie.node_parent[node]] and draws[node] < keep):
            walk.expanded[node] = True
            kids = np.arange(trie.child_start[node], trie.child_start[node] + trie.child_count[node])
            walk.log_probs[kids] = log_probs[kids]
    return walk


def _law(rng: np.random.Generator, values: np.ndarray):
    return stats.norm(values.mean() + rng.normal(0, 1), values.std() + rng.uniform(0.1, 2))


@pytest.mark.parametrize("seed", range(40))
def test_every_bound_contains_the_full_walks_figure_and_the_reported_completions(seed):
    rng = np.random.default_rng(seed)
    trie, values = _space(rng, group=int(rng.integers(1, 4)))
    log_probs, law = _model(rng, trie), _law(rng, values)
    bounds = SpaceBounds(trie, values, coupling_quantiles(law, EXACT_W1_LEVELS))
    full = np.exp(log_probs[trie.value_leaf])
    w1, kl = exact_wasserstein1(values, full, law), exact_kl(trie.value_probs, full)
    for keep in (0.0, 0.3, 0.7, 0.95):
        partial = bounds.partial(_partial(rng, trie, log_probs, keep))
        figures = figure_bounds(bounds, partial)
        low, high = bounds.w1(partial)
        assert low - 1e-12 <= w1 <= high + 1e-12
        assert mass_bounds(partial)[0] - 1e-15 <= full.sum() <= mass_bounds(partial)[1] + 1e-15
        for name in ("sequences", "on_space"):
            low_kl, high_kl = kl_bounds(partial)[name]
            assert low_kl - 1e-9 <= kl[name] <= high_kl + 1e-9
        # the completion reported is one of the distributions the bounds cover
        completed = partial.completed()
        assert np.all(completed[partial.resolved] == full[partial.resolved])
        assert low - 1e-12 <= exact_wasserstein1(values, completed, law) <= high + 1e-12
        assert exact_kl(trie.value_probs, completed)["sequences"] == pytest.approx(figures["kl_sequences"][0], abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_with_nothing_left_to_expand_the_bounds_are_the_figures(seed):
    rng = np.random.default_rng(100 + seed)
    trie, values = _space(rng, group=int(rng.integers(1, 4)))
    log_probs, law = _model(rng, trie), _law(rng, values)
    bounds = SpaceBounds(trie, values, coupling_quantiles(law, EXACT_W1_LEVELS))
    partial = bounds.partial(_partial(rng, trie, log_probs, keep=1.0))
    full = np.exp(log_probs[trie.value_leaf])
    assert partial.resolved.all() and partial.unresolved_mass == 0
    np.testing.assert_array_equal(partial.completed(), full)
    kl = exact_kl(trie.value_probs, full)
    assert mass_bounds(partial) == (pytest.approx(full.sum(), rel=1e-12),) * 2
    assert kl_bounds(partial)["sequences"] == (pytest.approx(kl["sequences"], rel=1e-12),) * 2
    low, high = bounds.w1(partial)
    # the envelopes keep a relative slack of 1e-6 on the CDF (float32 terms), nothing more
    assert high - low <= 1e-4 * w1_scale(law)


def test_the_mass_below_a_prefix_that_may_leave_the_space_keeps_w1_open():
    """One prefix holding half the mass, below which the model might end on the space or not: W1 is bounded on
    both sides by what placing that half at either end of the space or off it gives, and tightens as it shrinks."""
    rng = np.random.default_rng(7)
    trie, values = _space(rng, group=1)
    log_probs, law = _model(rng, trie), _law(rng, values)
    bounds = SpaceBounds(trie, values, coupling_quantiles(law, EXACT_W1_LEVELS))
    widths = []
    for keep in (0.2, 0.6, 1.0):
        partial = bounds.partial(_partial(np.random.default_rng(0), trie, log_probs, keep))
        low, high = bounds.w1(partial)
        widths.append(high - low)
    assert widths[0] >= widths[1] >= widths[2]
    assert widths[0] > 10 * widths[2]


def test_value_ranges_are_the_smallest_and_largest_value_below_each_node():
    rng = np.random.default_rng(3)
    trie, values = _space(rng, group=2)
    low, high = value_ranges(trie, values)
    for node in range(trie.num_nodes):
        below = [v for v, leaf in zip(values, trie.value_leaf, strict=True) if node in trie.ancestors(int(leaf))]
        assert (low[node], high[node]) == (min(below), max(below))


def test_a_zero_tolerance_is_the_full_walk():
    assert Tolerance(0.0, 0.001).full_walk and Tolerance(0.001, 0.0).full_walk
    assert not Tolerance(0.001, 0.001).full_walk


def test_where_the_model_keeps_its_mass_on_the_space_the_bounds_close_before_the_trie_is_walked(tiny_tokenizer):
    """A random tiny model at temperature 0.1 with 200 stop tokens gives short, concentrated answers; on a space
    made of them, the adaptive walk (temperature and stop tokens in force) meets a tolerance of 3% with a
    quarter of the trie, and its bounds hold the full walk's figures (to the float32 rounding of the two
    walks)."""
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(TinyModelSettings(), tiny_tokenizer)).eval()
    prompt = tiny_tokenizer("Give a number:")["input_ids"]
    stops = tuple(range(100, 300))
    next_token = NextToken(temperature=0.1, stop_ids=stops)
    drawn = sample(model, prompt, SamplingSettings(num_samples=500, max_new_tokens=4, temperature=0.1), stops, 1)
    space = sorted({tuple(ids) for ids, done in zip(drawn.token_ids, drawn.finished, strict=True) if done})
    target = np.random.default_rng(0).dirichlet(np.ones(len(space)))
    trie = build_trie(TokenizedValues.from_lists([[*answer, stops[0]] for answer in space]), target)
    values = np.random.default_rng(1).normal(0, 1, len(space))
    law, tolerance = stats.norm(0.3, 1.2), Tolerance(0.03, 0.03)
    bounds, scale = SpaceBounds(trie, values, coupling_quantiles(law, EXACT_W1_LEVELS)), w1_scale(law)
    walk = adaptive_node_log_probs(
        model, prompt, trie, lambda w: tolerance.met(bounds, bounds.partial(w), scale), 16, next_token
    )
    assert walk.expanded.sum() < 0.5 * (trie.child_count > 0).sum()
    figures = figure_bounds(bounds, bounds.partial(walk))
    assert figures["w1"][1] - figures["w1"][0] <= 0.03 * scale
    assert figures["mass"][1] - figures["mass"][0] <= 0.03
    full = np.exp(node_log_probs(model, prompt, trie, 16, next_token)[trie.value_leaf])
    kl = exact_kl(trie.value_probs, full)
    exact = {"w1": exact_wasserstein1(values, full, law), "mass": full.sum(), **{f"kl_{k}": v for k, v in kl.items()}}
    for name, (low, high) in figures.items():
        assert low * (1 - 1e-5) <= exact[name] <= (np.inf if high is None else high * (1 + 1e-5)), name
