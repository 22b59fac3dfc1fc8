"""Tiny randomly initialized NoveltyBench evaluators, built on the fly for the demo profile and the tests.

NoveltyBench scores generations with two models that the demo cannot download: a DeBERTa-v3 pair classifier
(is b a paraphrase of a?) and a Gemma-2 reward model. `build_tiny_evaluator` makes small models of the same
architectures (`DebertaV2ForSequenceClassification`, `Gemma2ForSequenceClassification`) with a byte-level BPE
tokenizer of their own and saves them with `save_pretrained`, so that the evaluation loads them through the
same `from_pretrained` path as the real ones. Their weights are random: their scores exercise the pipeline
and mean nothing. The classification heads are set so that the scores spread over the metric's decision
points (the classifier's 0.102 threshold splits pairs of short answers in half, the rewards center between the
thresholds at -7.7 and -2.0) instead of sitting on one side of all of them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    DebertaV2Config,
    DebertaV2ForSequenceClassification,
    Gemma2Config,
    Gemma2ForSequenceClassification,
    PreTrainedTokenizerFast,
)

from calibft.demo.tiny_model import (
    OPEN_ENDED_FAVOURITES,
    open_ended_chats,
    reproducible,
    save_atomically,
    settings_from_dict,
    training_chats,
)
from calibft.evals.noveltybench.runner import CLASSIFIER_THRESHOLD, similarity_probability

KINDS = ("similarity_classifier", "reward_model")
# Head weight std per kind: equivalence probabilities spread around 0.1, rewards around the thresholds' range.
HEAD_STD = {"similarity_classifier": 2.0, "reward_model": 0.5}

# Gemma's turn format, which the reward model scores [user prompt, assistant generation] conversations in.
REWARD_CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages %}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}"
    "{{- message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
)


@dataclass(frozen=True)
class TinyEvaluatorSettings:
    """Architecture and initialization of one tiny evaluator."""

    kind: str  # one of KINDS
    seed: int = 0
    vocab_size: int = 400
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 2
    max_position_embeddings: int = 1024
    head_std: float | None = None  # std of the classification head's weights (how far scores spread); None: HEAD_STD
    reward_center: float = -5.0  # reward model only: the mean reward of the calibration chats

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TinyEvaluatorSettings:
        return settings_from_dict(cls, values, "tiny-evaluator")


def train_tokenizer(specials: list[str], vocab_size: int, **named_specials: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (any text encodes) learned from the tiny chat model's training chats."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((f"{chat.user} {chat.answer}" for chat in training_chats()), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **named_specials)


def similarity_classifier(settings: TinyEvaluatorSettings):
    """A DeBERTa-v2 pair classifier (label 1: equivalent) and its tokenizer with [CLS]/[SEP]."""
    tokenizer = train_tokenizer(
        ["[PAD]", "[CLS]", "[SEP]", "[UNK]"],
        settings.vocab_size,
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        unk_token="[UNK]",
    )
    config = DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        intermediate_size=4 * settings.hidden_size,
        max_position_embeddings=settings.max_position_embeddings,
        type_vocab_size=0,
        relative_attention=True,
        position_buckets=64,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
        initializer_range=0.2,  # at the usual 0.02, every pair gets nearly the same probability
    )
    model = DebertaV2ForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, settings.head_std or HEAD_STD[settings.kind])
        model.classifier.bias.zero_()
        _center_similarity(model, tokenizer)
    return model, tokenizer


def _center_similarity(model, tokenizer: PreTrainedTokenizerFast) -> None:
    """Offset the "equivalent" logit so that NoveltyBench's threshold splits pairs of short answers in half.

    The pairs are the tiny chat model's favourite items, two by two: short answers, like most of what the demo
    compares. Without the offset, where the random scores fall against the threshold depends on the tokenizer.
    """
    items = list(OPEN_ENDED_FAVOURITES.values())[:8]
    margins = torch.tensor(
        [
            math.log(p / (1 - p))
            for p in (similarity_probability(model, tokenizer, a, b) for a in items for b in items if a != b)
        ]
    )
    threshold = math.log(CLASSIFIER_THRESHOLD / (1 - CLASSIFIER_THRESHOLD))
    model.classifier.bias[1] = threshold - float(margins.median())


def reward_model(settings: TinyEvaluatorSettings):
    """A Gemma-2 sequence-classification reward model (one score) and its tokenizer with Gemma's turn format."""
    tokenizer = train_tokenizer(
        ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        settings.vocab_size,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
    )
    tokenizer.chat_template = REWARD_CHAT_TEMPLATE
    head_dim = settings.hidden_size // settings.num_heads
    config = Gemma2Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=4 * settings.hidden_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_heads,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        max_position_embeddings=settings.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_labels=1,
    )
    model = Gemma2ForSequenceClassification(config).eval()
    _center_rewards(model, tokenizer, settings)
    return model, tokenizer


def _center_rewards(model, tokenizer: PreTrainedTokenizerFast, settings: TinyEvaluatorSettings) -> None:
    """Random head weights, plus a component along the mean pooled state of some chats worth `reward_center`.

    The score head has no bias, and every chat ends with the same turn-closing tokens, so the pooled states
    share a large common part m: a head w + c m/|m|² (w orthogonal to m) scores about c on average, with a
    spread that comes from w. The chats are the tiny chat model's open-ended requests and answers: short
    answers to short requests, like most of what the demo scores.
    """
    chats = open_ended_chats()
    with torch.no_grad():
        pooled = []
        for chat in chats:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": chat.user}, {"role": "assistant", "content": chat.answer}], tokenize=False
            )
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
            pooled.append(model.model(input_ids=ids).last_hidden_state[0, -1])
        mean = torch.stack(pooled).mean(0)
        weight = torch.randn_like(mean) * (settings.head_std or HEAD_STD[settings.kind])
        weight -= (weight @ mean) / (mean @ mean) * mean
        model.score.weight.copy_((weight + settings.reward_center * mean / (mean @ mean))[None])


BUILDERS = {"similarity_classifier": similarity_classifier, "reward_model": reward_model}


def build_tiny_evaluator(out_dir: str | os.PathLike[str], settings: TinyEvaluatorSettings) -> Path:
    """Initialize the evaluator from its seed and save model and tokenizer to `out_dir` atomically."""
    with reproducible(settings.seed, num_threads=1):
        model, tokenizer = BUILDERS[settings.kind](settings)
    model.eval()
    save_atomically(Path(out_dir), tokenizer, model, settings)
    return Path(out_dir)
