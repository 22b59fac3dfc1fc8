"""Each runner's largest step, which `calibft.pipeline.memory` runs on the meta device, feeds the model what the
runner's own largest batch feeds it: the same input, cache, mask and kept-logits shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from calibft.data.trie import build_trie, tokenize_values
from calibft.demo import tiny_evaluators
from calibft.demo.tiny_model import TinyModelSettings, tiny_config
from calibft.evals.noveltybench.runner import (
    CLASSIFIER_MAX_SIDE,
    largest_scoring_step,
    reward_scores,
    similarity_probability,
)
from calibft.evals.paloma.runner import documents_nll, largest_window_batch
from calibft.evals.tinybench.choices import continuation_logliks, largest_loglik_batch
from calibft.lm.generation import decode, largest_decode_step
from calibft.lm.trie_walk import TreeShape, largest_node_batch, node_log_probs

VALUES = ["0.1", "0.25", "0.2", "1", "10", "12.5", "12.75", "12", "2.5", "2.55", "3", "0.05"]


@pytest.fixture(scope="module")
def model(tiny_tokenizer):
    torch.manual_seed(0)
    return Qwen3ForCausalLM(tiny_config(TinyModelSettings(), tiny_tokenizer)).eval()


def _shapes(value) -> object:
    if isinstance(value, dict):
        return {key: _shapes(v) for key, v in value.items()}
    return tuple(value.shape) if isinstance(value, torch.Tensor) else value


def _calls(model, run) -> list[dict]:
    """What each forward call of `run()` feeds `model`: its tensors' shapes, the tokens its cache holds before."""
    calls = []

    def record(module, args, kwargs):
        cache = kwargs.get("past_key_values")
        fed = {key: _shapes(kwargs.get(key)) for key in ("input_ids", "position_ids", "attention_mask")}
        seen = cache.get_seq_length() if cache is not None else 0
        calls.append(
            {
                **fed,
                "cached": seen,
                "logits_to_keep": kwargs.get("logits_to_keep"),
                "use_cache": kwargs.get("use_cache"),
            }
        )

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.inference_mode():
            run()
    finally:
        handle.remove()
    return calls


def test_the_engines_largest_step_is_its_last_decode_step(model):
    prompt, answers, new = list(range(5, 12)), 6, 4
    runner = _calls(model, lambda: decode(model, prompt, answers, new, [], lambda logits, rows: rows * 0, answers))
    largest = _calls(model, lambda: largest_decode_step(model, len(prompt), new, answers))
    assert len(runner) == new  # the prefill, then a step per token but the last
    assert largest[-1] == runner[-1]
    assert largest[-1]["cached"] == len(prompt) + new - 2


@pytest.mark.parametrize("batch_nodes", [1, 3])
def test_the_walks_largest_batch_holds_the_deepest_ancestors(model, tiny_tokenizer, batch_nodes):
    values = tokenize_values(tiny_tokenizer, VALUES)
    trie = build_trie(values, np.full(len(VALUES), 1 / len(VALUES)))
    shape = TreeShape.of(trie)
    depth = int(shape.depth[shape.order].max())
    prompt = list(range(5, 14))
    runner = _calls(model, lambda: node_log_probs(model, prompt, trie, batch_nodes))
    largest = _calls(model, lambda: largest_node_batch(model, len(prompt), batch_nodes, depth))
    widest = max(runner[1:], key=lambda call: call["input_ids"][1])
    # one node a batch: the deepest node is a batch's first, so the widest batch is the largest step's
    if batch_nodes == 1:
        assert largest[-1] == widest
    assert largest[-1]["input_ids"][1] >= widest["input_ids"][1]
    assert largest[-1]["logits_to_keep"] == max(call["logits_to_keep"] for call in runner[1:]) == batch_nodes
    assert largest[0] == runner[0]  # the prompt's prefill


def test_palomas_largest_batch_is_its_first_of_full_windows(model):
    documents = [list(range(5, 45))] * 3  # windows of 16 every 8 tokens: four full windows a document
    runner = _calls(model, lambda: documents_nll(model, documents, window=16, stride=8, batch_size=4))
    largest = _calls(model, lambda: largest_window_batch(model, 4, 16))
    assert largest == runner[:1]
    assert largest[0]["input_ids"] == (4, 16) and largest[0]["use_cache"] is False


def test_noveltybench_scorings_largest_step_is_its_longest_reward_batch_then_a_full_pair():
    settings = tiny_evaluators.TinyEvaluatorSettings
    reward, reward_tokenizer = tiny_evaluators.reward_model(settings("reward_model"))
    classifier, classifier_tokenizer = tiny_evaluators.similarity_classifier(settings("similarity_classifier"))
    chats = [
        [{"role": "user", "content": "name a city " * n}, {"role": "assistant", "content": "Paris " * (2 * n)}]
        for n in (3, 9, 5, 12, 7, 1)
    ]
    rewarding = _calls(reward, lambda: reward_scores(reward, reward_tokenizer, chats, batch_size=3))
    long = "the quick brown fox " * 100  # both sides cut at the classifier's longest side
    comparing = _calls(classifier, lambda: similarity_probability(classifier, classifier_tokenizer, long, long))
    widest = max(rewarding, key=lambda call: call["input_ids"][1])  # chats are batched by length: a full batch
    assert widest["input_ids"][0] == 3
    largest_pair: list[dict] = []
    step = lambda: largest_scoring_step(reward, classifier, 3, widest["input_ids"][1])
    assert _calls(reward, lambda: largest_pair.extend(_calls(classifier, step))) == [widest]
    assert largest_pair == comparing
    assert comparing[0]["input_ids"] == (1, 2 * CLASSIFIER_MAX_SIDE + 3)


def test_tinybenchs_largest_loglik_batch_is_its_batch_of_longest_requests(model, tiny_tokenizer):
    context, continuation = 12, 5
    requests = [([1] * context, [2] * continuation)] * 3 + [([1] * 4, [2] * 2)]
    runner = _calls(model, lambda: continuation_logliks(model, tiny_tokenizer, requests, batch_size=3))
    largest = _calls(model, lambda: largest_loglik_batch(model, 3, context, continuation))
    assert largest == runner[:1]  # the first batch holds the longest requests
