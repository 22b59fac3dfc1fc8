"""Exact value probabilities from the trie walk agree with scoring every value on its own."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from calibft.chat import ChatOptions, chat_prompt_ids
from calibft.demo.tiny_model import TinyModelSettings, tiny_config
from calibft.exact import depth_bounds, node_log_probs, value_probabilities
from calibft.trie import build_trie, tokenize_values

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


def _brute_force(model, prompt_ids: list[int], values) -> np.ndarray:
    """Each value scored alone: prompt + its tokens in one uncached forward pass, summed float32 log-softmax."""
    out = []
    with torch.inference_mode():
        for tokens, length in zip(values.tokens, values.lengths, strict=True):
            ids = torch.tensor([prompt_ids + tokens[:length].tolist()])
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
            log_softmax = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
            out.append(log_softmax[torch.arange(length), torch.as_tensor(tokens[:length]).long()].double().sum())
    return np.array(out)


def test_the_trie_branches_at_several_depths(setup):
    trie = setup.trie
    bounds = depth_bounds(trie)
    branching = {d for d in range(len(bounds) - 1) if np.any(trie.child_count[bounds[d] : bounds[d + 1]] > 1)}
    assert len(branching) >= 3
    assert len(np.unique(trie.value_length)) >= 3


@pytest.mark.parametrize("batch_nodes", [1, 3, 10_000])
def test_exact_value_log_probs_match_brute_force(setup, batch_nodes):
    expected = _brute_force(setup.model, setup.prompt_ids, setup.values)
    log_probs = node_log_probs(setup.model, setup.prompt_ids, setup.trie, batch_nodes=batch_nodes)
    assert log_probs[0] == 0
    np.testing.assert_allclose(log_probs[setup.trie.value_leaf], expected, rtol=1e-5, atol=1e-5)
    # every node's log-prob is at most its parent's: a prefix is at least as likely as any extension of it
    assert np.all(log_probs[1:] <= log_probs[setup.trie.node_parent[1:]] + 1e-6)


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


def test_bad_arguments_are_rejected(setup):
    with pytest.raises(ValueError, match="batch_nodes"):
        node_log_probs(setup.model, setup.prompt_ids, setup.trie, batch_nodes=0)
    with pytest.raises(ValueError, match="empty"):
        node_log_probs(setup.model, [], setup.trie)
