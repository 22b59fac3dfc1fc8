"""Exact value probabilities from the trie walk agree with scoring every value on its own."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from calibft.data.trie import build_trie, tokenize_values
from calibft.demo.tiny_model import TinyModelSettings, tiny_config
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.generation import top_p_filter
from calibft.lm.trie_walk import (
    NextToken,
    adaptive_node_log_probs,
    forwarded_tokens,
    node_log_probs,
    value_probabilities,
)

# shared prefixes ("0.", "0.2", "1", "12", "12.", "2.5") make the trie branch at depths 1 to 4, and values end
# at several depths, so the EOS leaves do too
VALUES = ["0.1", "0.25", "0.2", "1", "10", "12.5", "12.75", "12", "2.5", "2.55", "3", "0.05"]


@pytest.fixture(scope="module")
def setup(tiny_tokenizer) -> SimpleNamespace:
    """A random tiny Qwen3 (seeded), the trie of `VALUES` under its tokenizer, and a chat prompt."""
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(TinyModelSettings(), tiny_tokenizer)).eval()
    values = tokenize_values(tiny_tokenizer, VALUES)
    trie = build_trie(values, np.full(len(VALUES), 1 / len(VALUES)))
    options = ChatOptions.from_config({"template_kwargs": {"enable_thinking": False}})
    prompt_ids = chat_prompt_ids(tiny_tokenizer, "Give a number between 0 and 13.", options)
    return SimpleNamespace(model=model, trie=trie, values=values, prompt_ids=prompt_ids)


def _brute_force(
    model, prompt_ids: list[int], values, temperature: float = 1.0, top_p: float = 1.0, stop_ids=None
) -> np.ndarray:
    """Each value scored alone: prompt + its tokens in one uncached forward pass, the log of each step's
    temperature-scaled, top-p filtered softmax summed; with `stop_ids`, the last step (the EOS) counts any of
    them."""
    out = []
    with torch.inference_mode():
        for tokens, length in zip(values.tokens, values.lengths, strict=True):
            ids = torch.tensor([prompt_ids + tokens[:length].tolist()])
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
            probs = top_p_filter(torch.softmax(logits[len(prompt_ids) - 1 : -1] / temperature, dim=-1), top_p)
            steps = probs[torch.arange(length), torch.as_tensor(tokens[:length]).long()].double()
            if stop_ids is not None:
                steps[-1] = probs[-1, list(stop_ids)].double().sum()
            out.append(torch.log(steps).sum())
    return np.array(out)


def _depths(trie) -> np.ndarray:
    """Each node's depth, by walking parents up to the root (a plain reference)."""
    depth = np.zeros(trie.num_nodes, dtype=np.int64)
    for node in range(1, trie.num_nodes):
        depth[node] = depth[trie.node_parent[node]] + 1
    return depth


def test_the_trie_branches_at_several_depths(setup):
    trie, depth = setup.trie, _depths(setup.trie)
    assert len(set(depth[trie.child_count > 1])) >= 3
    assert len(np.unique(trie.value_length)) >= 3


@pytest.mark.parametrize("batch_nodes", [1, 2, 3, 10_000])
def test_the_walk_forwards_the_prompt_each_internal_node_and_each_batchs_first_ancestors(setup, batch_nodes):
    """What `forwarded_tokens` counts is what the model is fed: the prompt, every internal node once, and per
    batch the ancestors of its first node (none when one batch holds every node)."""
    trie, fed = setup.trie, []
    hook = setup.model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    try:
        node_log_probs(setup.model, setup.prompt_ids, trie, batch_nodes=batch_nodes)
    finally:
        hook.remove()
    internal = {int(trie.node_parent[node]) for node in range(1, trie.num_nodes)} - {0}
    assert forwarded_tokens(len(setup.prompt_ids), trie, batch_nodes) == sum(fed)
    assert len(fed) == 1 + -(-len(internal) // batch_nodes)
    if batch_nodes == 10_000:
        assert sum(fed) == len(setup.prompt_ids) + len(internal)
    else:
        assert sum(fed) > len(setup.prompt_ids) + len(internal)


@pytest.mark.parametrize("batch_nodes", [1, 3, 10_000])
def test_exact_value_log_probs_match_brute_force(setup, batch_nodes):
    expected = _brute_force(setup.model, setup.prompt_ids, setup.values)
    log_probs = node_log_probs(setup.model, setup.prompt_ids, setup.trie, batch_nodes=batch_nodes)
    assert log_probs[0] == 0
    np.testing.assert_allclose(log_probs[setup.trie.value_leaf], expected, rtol=1e-5, atol=1e-5)
    # every node's log-prob is at most its parent's: a prefix is at least as likely as any extension of it
    assert np.all(log_probs[1:] <= log_probs[setup.trie.node_parent[1:]] + 1e-6)


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.3, 0.9), (1.0, 0.05)])
def test_sampling_settings_and_stop_ids_match_brute_force(setup, temperature, top_p):
    """The engine's distribution: temperature, nucleus filtering (top_p 0.05 leaves a few tokens, so most
    values get probability 0), and any of several stop ids ending a value."""
    eos = int(setup.values.tokens[0, setup.values.lengths[0] - 1])
    stop_ids = (eos, 5, 7)
    expected = _brute_force(setup.model, setup.prompt_ids, setup.values, temperature, top_p, stop_ids)
    next_token = NextToken(temperature=temperature, top_p=top_p, stop_ids=stop_ids)
    probs, outside = value_probabilities(setup.model, setup.prompt_ids, setup.trie, 2, next_token)
    np.testing.assert_allclose(probs, np.exp(expected), rtol=1e-4, atol=1e-12)
    assert probs.sum() + outside == pytest.approx(1.0, abs=1e-12)
    if top_p < 1:
        assert np.any(probs == 0)


def test_batch_sizes_agree_and_masses_add_up_to_one(setup):
    results = [value_probabilities(setup.model, setup.prompt_ids, setup.trie, batch_nodes=b) for b in (1, 3, 10_000)]
    probs, outside = results[-1]
    for other_probs, other_outside in results[:-1]:
        np.testing.assert_allclose(other_probs, probs, rtol=1e-5)
        assert other_outside == pytest.approx(outside, rel=1e-5)
    assert probs.shape == (len(VALUES),)
    assert np.all(probs > 0)
    assert probs.sum() + outside == pytest.approx(1.0, abs=1e-12)
    # a random model spreads its mass over the whole vocabulary: 12 short strings get a small part of it
    assert 0 < probs.sum() < 1e-3
    assert outside > 0.99


@pytest.mark.parametrize("batch_nodes", [1, 3, 10_000])
def test_the_adaptive_walk_left_to_the_end_scores_every_node_as_the_full_walk_does(setup, batch_nodes):
    trie, fed = setup.trie, []
    hook = setup.model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    try:
        walk = adaptive_node_log_probs(setup.model, setup.prompt_ids, trie, lambda _: False, batch_nodes)
    finally:
        hook.remove()
    assert walk.expanded[trie.child_count > 0].all() and not walk.expanded[trie.child_count == 0].any()
    full = node_log_probs(setup.model, setup.prompt_ids, trie)
    np.testing.assert_allclose(walk.log_probs, full, rtol=1e-5, atol=1e-5)
    assert walk.tokens == sum(fed)


def test_the_adaptive_walk_expands_the_most_probable_prefixes_first(setup):
    """Stopped after its second round, the walk has expanded every prefix more probable than any it left."""
    asked = []

    def done(walk) -> bool:
        asked.append(int(walk.expanded.sum()))
        return len(asked) == 2

    walk = adaptive_node_log_probs(setup.model, setup.prompt_ids, setup.trie, done, batch_nodes=2)
    expanded, frontier = np.flatnonzero(walk.expanded)[1:], walk.frontier(setup.trie)
    assert len(expanded) and len(frontier) and asked[0] < asked[1]
    assert walk.log_probs[expanded].min() > walk.log_probs[frontier].max()
    full = node_log_probs(setup.model, setup.prompt_ids, setup.trie)
    scored = ~np.isnan(walk.log_probs)
    np.testing.assert_allclose(walk.log_probs[scored], full[scored], rtol=1e-5, atol=1e-5)
    assert np.isnan(walk.log_probs[~scored]).all() and (~scored).any()


def test_bad_arguments_are_rejected(setup):
    with pytest.raises(ValueError, match="batch_nodes"):
        node_log_probs(setup.model, setup.prompt_ids, setup.trie, batch_nodes=0)
    with pytest.raises(ValueError, match="empty"):
        node_log_probs(setup.model, [], setup.trie)


def test_the_exact_distribution_is_what_the_sampling_engine_draws(tiny_tokenizer):
    """Goodness of fit: the engine's answers to one prompt against the exact probabilities of a space made of
    answers it gave under another seed. 200 stop tokens and temperature 0.2 give a random model short,
    concentrated answers, so that the space holds a sizeable mass; values expected fewer than 5 times are
    pooled with the answers off the space. (The test has the power to see a 10% error in the temperature, or
    a quarter of the stop tokens left out: p-values below 1e-14.)"""
    from scipy import stats

    from calibft.data.trie import TokenizedValues
    from calibft.lm.generation import SamplingSettings, sample

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(TinyModelSettings(), tiny_tokenizer)).eval()
    prompt = tiny_tokenizer("Give a number:")["input_ids"]
    stops, temperature = tuple(range(100, 300)), 0.2

    def answers(num_samples: int, seed: int) -> list[tuple[int, ...] | None]:
        """Each answer's tokens before its stop token; None for an answer that did not stop."""
        settings = SamplingSettings(num_samples=num_samples, max_new_tokens=3, temperature=temperature)
        drawn = sample(model, prompt, settings, stops, seed)
        return [tuple(ids) if done else None for ids, done in zip(drawn.token_ids, drawn.finished, strict=True)]

    seen = [a for a in answers(3000, seed=1) if a is not None]  # () is stopping at once
    space = sorted({a for a in seen if seen.count(a) >= 5})
    assert len(space) >= 20
    trie = build_trie(TokenizedValues.from_lists([[*a, stops[0]] for a in space]), np.full(len(space), 1 / len(space)))
    probs, outside = value_probabilities(model, prompt, trie, 16, NextToken(temperature, 1.0, stops))

    draws = 20_000
    index = {a: i for i, a in enumerate(space)}
    found = np.array([index.get(a, len(space)) for a in answers(draws, seed=2)])
    counts = np.bincount(found, minlength=len(space) + 1)
    expected = np.append(probs, outside) * draws
    kept = np.flatnonzero(expected[:-1] >= 5)
    assert len(kept) >= 20 and probs[kept].sum() > 0.3

    def pooled(x: np.ndarray) -> np.ndarray:
        return np.append(x[kept], x.sum() - x[kept].sum())

    assert stats.chisquare(pooled(counts), pooled(expected)).pvalue > 1e-3
