"""The sampling engine: reproducibility, agreement with `model.generate`, stops, top-p, one prefill, PEFT."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency, chisquare
from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3TextConfig
from transformers.generation.logits_process import TopPLogitsWarper

from calibft.data.grid import prompts
from calibft.demo.tiny_model import build_tiny_model
from calibft.lm.chat import ChatOptions, chat_prompt_ids, decode_output
from calibft.lm.generation import (
    NonFiniteProbabilities,
    SamplingSettings,
    decode,
    draw,
    sample,
    sample_texts,
    seed_for,
    stop_token_ids,
    top_p_filter,
)
from calibft.lm.models import attach_lora, load_model, load_tokenizer

CHAT = {"template_kwargs": {"enable_thinking": False}}
DRAWS = 3000  # answers per side of a chi-square test
DRAW_TOKENS = 2
P_THRESHOLD = 1e-3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A briefly trained tiny model (still high-entropy: many first tokens are likely), its tokenizer, a prompt."""
    root: Path = tmp_path_factory.mktemp("generation")
    build_tiny_model(root / "tiny", train_steps=60)
    tokenizer = load_tokenizer(root / "tiny")
    model = load_model(root / "tiny", "fp32", "cpu")
    prompt_ids = chat_prompt_ids(tokenizer, prompts("train")[0].prompt, ChatOptions.from_config(CHAT))
    with torch.inference_mode():
        first = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    # the EOS and the most likely first token, so that about a quarter of the answers stop at once
    stops = sorted({*stop_token_ids(model, tokenizer), int(first.argmax())})
    return SimpleNamespace(path=root / "tiny", model=model, tokenizer=tokenizer, prompt_ids=prompt_ids, stops=stops)


def _cut_at_stop(row: Sequence[int], stops: Sequence[int]) -> list[int]:
    return next((list(row[:i]) for i, token in enumerate(row) if token in stops), list(row))


@pytest.fixture(scope="module")
def reference(tiny) -> list[list[int]]:
    """`DRAWS` answers of plain `model.generate` (pure sampling, no top-k), cut before their first stop token."""
    n, length = DRAWS, len(tiny.prompt_ids)
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(7)
        out = tiny.model.generate(
            torch.tensor([tiny.prompt_ids] * n),
            attention_mask=torch.ones((n, length), dtype=torch.long),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=DRAW_TOKENS,
            eos_token_id=tiny.stops,
            pad_token_id=tiny.tokenizer.pad_token_id,
        )
    return [_cut_at_stop(row, tiny.stops) for row in out[:, length:].tolist()]


def _chi2_pvalue(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], prefix: int) -> float:
    """Two-sample chi-square p-value on the answers' first `prefix` tokens; rare categories (< 10 in all) pooled."""
    count_a = Counter(tuple(x[:prefix]) for x in a)
    count_b = Counter(tuple(x[:prefix]) for x in b)
    keys = sorted(count_a.keys() | count_b.keys())
    table = np.array([[count_a[k] for k in keys], [count_b[k] for k in keys]])
    common = table.sum(axis=0) >= 10
    pooled = np.concatenate([table[:, common], table[:, ~common].sum(axis=1, keepdims=True)], axis=1)
    assert pooled.shape[1] >= 10, "too few categories for a meaningful test"
    return float(chi2_contingency(pooled).pvalue)


def test_seed_for_is_stable_and_tells_parts_apart():
    assert seed_for(0, "qwen3_8b", "soft", "poisson-001") == 3855247624539797120  # same in every process
    seeds = {seed_for(1), seed_for("1"), seed_for("a", "b"), seed_for("a b"), seed_for("b", "a"), seed_for()}
    assert len(seeds) == 6
    assert all(0 <= s < 2**63 for s in seeds)
    assert seed_for(np.int64(3), "x") == seed_for(3, "x")


def test_settings_are_validated():
    for bad in (
        {"num_samples": -1},
        {"max_new_tokens": 0},
        {"temperature": 0.0},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"batch_size": 0},
    ):
        with pytest.raises(ValueError):
            SamplingSettings(**{"num_samples": 4, "max_new_tokens": 4, **bad})


def test_stop_token_ids_are_the_union_of_generation_config_and_tokenizer():
    tokenizer = SimpleNamespace(eos_token_id=2)
    config = lambda eos: SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=eos))
    assert stop_token_ids(config([7, 2]), tokenizer) == [2, 7]
    assert stop_token_ids(config(9), tokenizer) == [2, 9]
    assert stop_token_ids(config(None), tokenizer) == [2]
    assert stop_token_ids(SimpleNamespace(), tokenizer) == [2]
    assert stop_token_ids(config([4]), SimpleNamespace(eos_token_id=None)) == [4]


def test_top_p_filter_on_hand_computed_probabilities():
    probs = torch.tensor([[0.125, 0.5, 0.25, 0.125], [0.1, 0.2, 0.3, 0.4]])
    # row 0: sorted 0.5, 0.25, 0.125, 0.125 (mass before 0, 0.5, 0.75, 0.875); row 1: 0.4, 0.3, 0.2, 0.1 (0, .4, .7, .9)
    expected = {
        0.6: [[0, 2 / 3, 1 / 3, 0], [0, 0, 3 / 7, 4 / 7]],
        0.5: [[0, 1, 0, 0], [0, 0, 3 / 7, 4 / 7]],  # row 0: the top token alone has mass 0.5: the set is complete
        0.75: [[0, 2 / 3, 1 / 3, 0], [0, 2 / 9, 3 / 9, 4 / 9]],
        1e-6: [[0, 1, 0, 0], [0, 0, 0, 1]],  # always the most likely token
    }
    for top_p, rows in expected.items():
        torch.testing.assert_close(
            top_p_filter(probs, top_p), torch.tensor(rows, dtype=torch.float32), msg=f"top_p={top_p}"
        )
    assert top_p_filter(probs, 1.0) is probs


@pytest.mark.parametrize("top_p", [0.3, 0.8, 0.95])
def test_top_p_filter_keeps_the_tokens_transformers_keeps(top_p):
    logits = torch.randn(64, 200, generator=torch.Generator().manual_seed(3)) * 3
    kept = top_p_filter(torch.softmax(logits, dim=-1), top_p) > 0
    assert torch.equal(kept, torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone())))


def test_draw_follows_the_row_probabilities_and_never_draws_zero_probability_tokens():
    generator = torch.Generator().manual_seed(1)
    weights = torch.tensor([0.5, 0.0, 1.5, 0.25, 0.75])  # unnormalized, one impossible token
    tokens = draw(weights.expand(40_000, -1), generator)
    counts = np.bincount(tokens.numpy(), minlength=5)
    assert counts[1] == 0
    assert chisquare(counts[[0, 2, 3, 4]], 40_000 * np.array([0.5, 1.5, 0.25, 0.75]) / 3).pvalue > P_THRESHOLD
    one_hot = torch.tensor([[0.0, 0.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0], [0.0, 1e-30, 0.0, 0.0]]).repeat(1000, 1)
    assert draw(one_hot, generator).tolist() == [3, 0, 1] * 1000


@pytest.mark.parametrize("row", [[0.5, float("nan"), 0.5], [0.0, float("inf"), 1.0], [0.0, 0.0, 0.0]])
def test_draw_refuses_rows_that_are_not_a_distribution(row):
    # searchsorted would place the point past the last token: an id outside the vocabulary
    probs = torch.tensor([[0.2, 0.3, 0.5], row, [1.0, 0.0, 0.0]])
    with pytest.raises(NonFiniteProbabilities, match="1 of 3 rows of next-token probabilities are NaN, infinite"):
        draw(probs, torch.Generator().manual_seed(0))


def test_same_seed_same_answers_without_touching_the_global_rng(tiny):
    settings = SamplingSettings(num_samples=40, max_new_tokens=8, batch_size=16)
    run = lambda seed: sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    first = run(seed_for(1, "tiny", "base", "p"))
    assert torch.equal(torch.get_rng_state(), state)
    other = run(seed_for(2, "tiny", "base", "p"))
    torch.rand(5)
    again = run(seed_for(1, "tiny", "base", "p"))
    assert first.token_ids == again.token_ids
    assert np.array_equal(first.finished, again.finished)
    assert first.token_ids != other.token_ids


def test_samples_are_distributed_like_generate(tiny, reference):
    # three decode batches, so that the cache copy and row dropping of every batch are exercised
    settings = SamplingSettings(num_samples=DRAWS, max_new_tokens=DRAW_TOKENS, batch_size=1100)
    answers = sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed=11).token_ids
    assert sum(len(a) == 0 for a in answers) > DRAWS // 10  # the forced stop made many rows finish at once
    for prefix in (1, 2):
        assert _chi2_pvalue(answers, reference, prefix) > P_THRESHOLD


@pytest.mark.parametrize("wrong", [{"temperature": 1.1}, {"top_p": 0.9}])
def test_the_distribution_test_rejects_a_wrong_sampler(tiny, reference, wrong):
    settings = SamplingSettings(num_samples=DRAWS, max_new_tokens=DRAW_TOKENS, **wrong)
    answers = sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed=11).token_ids
    assert min(_chi2_pvalue(answers, reference, prefix) for prefix in (1, 2)) < P_THRESHOLD


def test_answers_end_before_stop_tokens(tiny):
    settings = SamplingSettings(num_samples=300, max_new_tokens=6, batch_size=128)
    generations = sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed=5)
    lengths = np.array([len(ids) for ids in generations.token_ids])
    assert len(generations.token_ids) == 300 and generations.finished.shape == (300,)
    assert not any(set(ids) & set(tiny.stops) for ids in generations.token_ids)
    assert np.array_equal(generations.finished, lengths < 6)
    assert (lengths == 0).any() and (lengths == 6).any() and ((lengths > 0) & (lengths < 6)).any()


# rank of the token each answer takes at each position (0: the likeliest), so that answers differ
RANKS = np.random.default_rng(0).integers(0, 4, size=(10, 6)).tolist()


def _recomputed(model, prompt_ids: list[int], row: int, max_new_tokens: int) -> list[int]:
    """Answer `row` of the rank choice, each step a full forward of prompt + answer so far, without a cache."""
    answer: list[int] = []
    with torch.inference_mode():
        for position in range(max_new_tokens):
            logits = model(input_ids=torch.tensor([prompt_ids + answer])).logits[0, -1].float()
            answer.append(int(logits.argsort(descending=True)[RANKS[row][position]]))
    return answer


def _stop_varying_lengths(answers: list[list[int]], max_new_tokens: int) -> list[int]:
    """The token that, as the stop token, gives the most distinct answer lengths while some answer runs to the end."""
    lengths = lambda token: [len(_cut_at_stop(answer, [token])) for answer in answers]
    candidates = sorted({token for answer in answers for token in answer})
    return [max(candidates, key=lambda t: (max_new_tokens in lengths(t), len(set(lengths(t)))))]


GEMMA3_TEXT = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "sliding_window": 4,  # shorter than the prompt: the sliding layer's cache holds only the last 3 positions
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 128,
}


def _random_gemma3(multimodal: bool):
    """A tiny randomly initialized Gemma-3: text-only (1B-style) or with a vision tower (4B-27B-style)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if not multimodal:
            return Gemma3ForCausalLM(Gemma3TextConfig(**GEMMA3_TEXT)).eval()
        vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
        config = Gemma3Config(
            text_config={**GEMMA3_TEXT, "vocab_size": 70},
            vision_config={**vision, "image_size": 16, "patch_size": 4},
            mm_tokens_per_image=4,
            boi_token_index=67,
            eoi_token_index=68,
            image_token_index=69,
        )
        return Gemma3ForConditionalGeneration(config).eval()


@pytest.mark.parametrize("family", ["qwen3", "gemma3-text", "gemma3-multimodal"])
def test_cached_decoding_matches_full_recomputation(tiny, family):
    """Copying, repeating and shrinking the cache gives exactly the tokens of a cache-free recomputation."""
    if family == "qwen3":
        model, prompt_ids = tiny.model, tiny.prompt_ids
    else:  # a prompt longer than the sliding window
        model, prompt_ids = _random_gemma3(family == "gemma3-multimodal"), [(7 * i + 3) % 64 for i in range(11)]
    rows, max_new = len(RANKS), len(RANKS[0])
    full = [_recomputed(model, prompt_ids, row, max_new) for row in range(rows)]
    stops = _stop_varying_lengths(full, max_new)
    expected = [_cut_at_stop(answer, stops) for answer in full]
    assert len({len(a) for a in expected}) >= 3 and any(len(a) == max_new for a in expected)
    table = torch.tensor(RANKS)
    steps = [0, 0, 0]  # per decode batch (answers 4b to 4b + 3), the position being chosen

    def choose(logits: torch.Tensor, answer_rows: torch.Tensor) -> torch.Tensor:
        batch = int(answer_rows[0]) // 4
        ranks = table[answer_rows, steps[batch]]
        steps[batch] += 1
        return logits.argsort(dim=-1, descending=True).gather(1, ranks[:, None]).squeeze(1)

    generations = decode(model, prompt_ids, rows, max_new, stops, choose, batch_size=4)
    assert generations.token_ids == expected
    assert generations.finished.tolist() == [len(a) < max_new for a in expected]


def test_the_prompt_is_prefilled_once(tiny):
    calls: list[tuple[int, int]] = []
    hook = tiny.model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        settings = SamplingSettings(num_samples=10, max_new_tokens=5, batch_size=4)
        generations = sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed=3)
    finally:
        hook.remove()
    assert calls[0] == (1, len(tiny.prompt_ids))
    decode_calls = calls[1:]
    assert all(length == 1 and 1 <= batch <= 4 for batch, length in decode_calls)
    # three decode batches (4 + 4 + 2), each at most max_new_tokens - 1 forward calls after the prefill's logits
    assert 3 <= len(decode_calls) <= 3 * 4
    # an answer is fed back once per token it kept (none after the last step), a finished one leaves the batch
    lengths = [len(ids) for ids in generations.token_ids]
    assert max(lengths) >= 2
    assert sum(batch for batch, _ in decode_calls) == sum(min(n, 5 - 1) for n in lengths)


def test_a_peft_lora_model_samples_reproducibly(tiny):
    model = attach_lora(
        load_model(tiny.path, "fp32", "cpu"),
        {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # a fresh adapter is the identity; make it change the outputs
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
    model.train()
    settings = SamplingSettings(num_samples=50, max_new_tokens=5, batch_size=20)
    lora = sample(model, tiny.prompt_ids, settings, tiny.stops, seed=9)
    assert model.training  # the caller's mode is restored
    assert len(lora.token_ids) == 50 and lora.finished.shape == (50,) and lora.finished.dtype == bool
    assert all(len(ids) <= 5 for ids in lora.token_ids)
    assert np.array_equal(lora.finished, [len(ids) < 5 for ids in lora.token_ids])
    assert sample(model, tiny.prompt_ids, settings, tiny.stops, seed=9).token_ids == lora.token_ids
    assert sample(tiny.model, tiny.prompt_ids, settings, tiny.stops, seed=9).token_ids != lora.token_ids


def test_sample_texts_decodes_the_sampled_answers(tiny):
    settings = SamplingSettings(num_samples=20, max_new_tokens=6)
    texts, finished = sample_texts(tiny.model, tiny.tokenizer, tiny.prompt_ids, settings, seed=4)
    generations = sample(tiny.model, tiny.prompt_ids, settings, stop_token_ids(tiny.model, tiny.tokenizer), seed=4)
    assert texts == [decode_output(tiny.tokenizer, ids) for ids in generations.token_ids]
    assert np.array_equal(finished, generations.finished)
