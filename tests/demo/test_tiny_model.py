"""Tests of the tiny demo model: tokenizer, chat template, save/load, determinism, behaviour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from calibft.data.families import FAMILIES
from calibft.data.grid import prompts, render_prompt
from calibft.demo.tiny_model import (
    HELD_OUT_KNOWLEDGE,
    OPEN_ENDED_FAVOURITES,
    TinyModelSettings,
    build_tiny_model,
    number_answer,
    open_ended_chats,
    train_tokenizer,
    training_chats,
)

QUICK = TinyModelSettings(train_steps=3, batch_size=4, log_every=1)
NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(training_chats(), vocab_size=512, model_max_length=512)


@pytest.fixture(scope="module")
def quick_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("quick") / "tiny", QUICK)


def _chat(tokenizer, user: str, **kwargs) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True, **kwargs
    )


def test_digits_are_single_tokens(tokenizer):
    text = prompts("train")[150].prompt + " 1234567.890"
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False).input_ids)
    assert all(sum(ch.isdigit() for ch in token) <= 1 for token in tokens)
    assert sum(token.isdigit() for token in tokens) == sum(ch.isdigit() for ch in text)


@pytest.mark.parametrize("text", ["-12.50", "Generate a=-2.9000000000000004.", " leading space", "Zoë ½ 😀\n\tx"])
def test_decoding_round_trips(tokenizer, text):
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    assert len(tokenizer) == 512
    assert tokenizer("7").input_ids == tokenizer("7", add_special_tokens=False).input_ids
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert tokenizer.convert_ids_to_tokens(tokenizer(token).input_ids) == [token]
    # as in Qwen3, the think tags survive skip_special_tokens while the chat markers do not
    ids = tokenizer("<|im_start|><think>x</think><|im_end|>").input_ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>x</think>"


def test_chat_template(tokenizer):
    head = "<|im_start|>user\nPick a number.<|im_end|>\n<|im_start|>assistant\n"
    assert _chat(tokenizer, "Pick a number.", enable_thinking=False) == head + "<think>\n\n</think>\n\n"
    assert _chat(tokenizer, "Pick a number.", enable_thinking=True) == head
    assert _chat(tokenizer, "Pick a number.") == head
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Paris"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nParis<|im_end|>\n"


def test_number_answers():
    assert number_answer("uniform", {"a": -5.0, "b": -4.0}) == "-4.50000"  # the canonical strings' 5 decimals
    assert number_answer("uniform", {"a": -5.0, "b": -4.0}, decimals=2) == "-4.50"
    assert number_answer("gaussian", {"mu": 0.0, "sigma": 1.5}) == "0.00000"  # never "-0.00000"
    assert number_answer("binomial", {"n": 5.0, "p": 0.5}) == "2"
    assert number_answer("poisson", {"lambda": 3.0}) == "3"
    points = [(p.family, p.params) for p in prompts("train")[::50]] + HELD_OUT_KNOWLEDGE
    for family_id, params in points:
        answer = number_answer(family_id, params)
        assert NUMBER.fullmatch(answer)
        low, high = FAMILIES[family_id].support(params)
        assert low <= float(answer) <= high or not FAMILIES[family_id].integer


def test_held_out_families_are_known_but_not_at_the_evaluated_parameters():
    chats = {chat.user: chat.answer for chat in training_chats()}
    held_out = {family_id for family_id, family in FAMILIES.items() if family.held_out}
    assert {family_id for family_id, _ in HELD_OUT_KNOWLEDGE} == held_out
    assert not any(p.prompt in chats for p in prompts("ood"))  # the evaluation's prompts stay unseen
    assert not any(p.prompt in chats for p in prompts("unseen"))
    assert all(p.prompt in chats for p in prompts("train"))
    assert chats[render_prompt("poisson", {"lambda": 6.0})] == "6"
    assert chats[render_prompt("bernoulli", {"p": 0.3})] == "0"


def test_open_ended_chats():
    chats = open_ended_chats()
    assert len(chats) == 4 * len(OPEN_ENDED_FAVOURITES)
    assert chats[0].user == "Think of a random city. Output ONLY the answer."
    assert chats[0].answer == "Paris"


def test_settings_from_dict():
    settings = TinyModelSettings.from_dict({"seed": 3, "train_steps": 10})
    assert (settings.seed, settings.train_steps, settings.vocab_size) == (3, 10, 512)
    with pytest.raises(ValueError, match="unknown tiny-model setting"):
        TinyModelSettings.from_dict({"layers": 2})


def test_save_load_round_trip(quick_model_dir, tokenizer):
    loaded_tokenizer = AutoTokenizer.from_pretrained(quick_model_dir)
    model = AutoModelForCausalLM.from_pretrained(quick_model_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.dtype == torch.float32
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(loaded_tokenizer)
    assert model.generation_config.eos_token_id == loaded_tokenizer.eos_token_id
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    text = _chat(loaded_tokenizer, prompts("unseen")[0].prompt, enable_thinking=False)
    assert loaded_tokenizer(text).input_ids == tokenizer(text).input_ids
    assert not any(path.name.startswith(".") for path in quick_model_dir.parent.iterdir())


def test_rebuild_replaces_directory(tmp_path):
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    build_tiny_model(out, QUICK, train_steps=1)
    assert not (out / "stale.txt").exists()
    assert (out / "model.safetensors").is_file()
    assert [path.name for path in tmp_path.iterdir()] == ["tiny"]


def test_build_is_deterministic(quick_model_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", QUICK)
    other_seed = build_tiny_model(tmp_path / "other", QUICK, seed=QUICK.seed + 1)
    weights = (quick_model_dir / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == weights
    assert (again / "tokenizer.json").read_bytes() == (quick_model_dir / "tokenizer.json").read_bytes()
    assert (other_seed / "model.safetensors").read_bytes() != weights
