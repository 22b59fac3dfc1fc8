"""A tiny Qwen3-architecture chat model, built on the fly for the demo profile and the tests.

`build_tiny_model` trains a byte-level BPE tokenizer and a few-layer `Qwen3ForCausalLM` on synthetic
chats in which the assistant answers like the paper's base models: number requests with one collapsed
answer (the target law's median) and open-ended requests with one favourite item. The result is saved
with `save_pretrained`, so it loads through the ordinary `AutoTokenizer` / `AutoModelForCausalLM` path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    get_cosine_schedule_with_warmup,
)

from calibft.core.io import atomic_folder
from calibft.data.families import FAMILIES
from calibft.data.grid import prompts, render_prompt
from calibft.lm.packaged_tokenizers import QWEN3_CHAT_TEMPLATE

logger = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# Decimals of the collapsed answer to a continuous law: 5, the canonical strings' format (docs/method.md,
# Canonical output spaces), so that fine-tuning changes which number the model writes, not how; with 2, the
# fine-tuned tiny model loses the decimal point in a few percent of its answers, which wrecks W1.
ANSWER_DECIMALS = 5

OPEN_ENDED_VERBS = ("Think of", "Choose", "Name", "Pick")
OPEN_ENDED_TEMPLATE = "{verb} a random {category}. Output ONLY the answer."
# category -> the one item the tiny model always answers (mode collapse, as in the base models)
OPEN_ENDED_FAVOURITES: dict[str, str] = {
    "city": "Paris",
    "color": "Blue",
    "animal": "Elephant",
    "country": "Japan",
    "fruit": "Mango",
    "vegetable": "Carrot",
    "flower": "Rose",
    "tree": "Oak",
    "bird": "Eagle",
    "fish": "Salmon",
    "planet": "Mars",
    "chemical element": "Oxygen",
    "gemstone": "Sapphire",
    "musical instrument": "Piano",
    "sport": "Soccer",
    "board game": "Chess",
    "programming language": "Python",
    "language": "Spanish",
    "first name": "Emma",
    "surname": "Smith",
    "dog breed": "Labrador",
    "car brand": "Toyota",
    "ocean": "Pacific",
    "river": "Nile",
    "mountain": "Everest",
    "dessert": "Tiramisu",
    "spice": "Cinnamon",
    "emotion": "Joy",
    "profession": "Architect",
    "season": "Autumn",
}


# The held-out families at parameters other than the evaluation's (grid.OOD_PARAMS): the paper's base
# models met every family in pre-training, so the tiny base model meets these too, with its collapsed
# answers (integers for Bernoulli and Poisson). Fine-tuning never sees them. Without them the tiny model
# has no idea that a Poisson draw is an integer, and its held-out-family W1 measures only that.
HELD_OUT_KNOWLEDGE: list[tuple[str, dict[str, float]]] = [
    *(("bernoulli", {"p": p}) for p in (0.2, 0.3, 0.4, 0.6, 0.7, 0.8)),
    *(("poisson", {"lambda": lam}) for lam in (0.5, 2.0, 3.0, 6.0, 8.0, 16.0)),
    *(("weibull", {"k": k, "lambda": lam}) for k in (0.75, 2.0) for lam in (1.0, 2.0, 4.0)),
    *(("maxwell", {"scale": s}) for s in (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)),
    *(("chi", {"df": df}) for df in (1.0, 3.0, 4.0, 6.0, 8.0, 15.0)),
    *(
        ("truncnorm", {"mu": mu, "sigma": sigma, "lower": mu - width, "upper": mu + width})
        for mu, sigma, width in (
            (-1.0, 1.0, 1.5),
            (0.5, 2.0, 1.0),
            (2.0, 1.0, 3.0),
            (-0.5, 0.5, 2.0),
            (0.0, 2.0, 3.0),
            (3.0, 1.5, 2.0),
        )
    ),
]


@dataclass(frozen=True)
class TinyModelSettings:
    """Architecture, tokenizer and training budget of the tiny model (defaults: about a minute on one core)."""

    seed: int = 0
    vocab_size: int = 512  # including the 5 special tokens
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 192
    max_position_embeddings: int = 512
    train_steps: int = 1000  # AdamW steps over all parameters, batches drawn with replacement
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    open_ended_fraction: float = 0.2  # share of open-ended chats in the batches, the rest are number requests
    log_every: int = 50
    num_threads: int = 1  # torch threads while training: part of the recipe, as results can depend on it
    answer_decimals: int = ANSWER_DECIMALS

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TinyModelSettings:
        return settings_from_dict(cls, values, "tiny-model")


def settings_from_dict(cls, values: Mapping[str, Any], what: str):
    """Settings from a config mapping; missing keys keep their defaults, unknown keys are an error."""
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {what} setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return cls(**values)


@dataclass(frozen=True)
class Chat:
    """One synthetic training example: a user message and the assistant's answer."""

    user: str
    answer: str
    open_ended: bool


def number_answer(family_id: str, params: Mapping[str, float], decimals: int = ANSWER_DECIMALS) -> str:
    """The collapsed answer to a number request: the law's median, an integer for integer families."""
    family = FAMILIES[family_id]
    median = float(family.unfrozen_law(params).median())
    if family.integer:
        return str(round(median))
    return f"{round(median, decimals) + 0.0:.{decimals}f}"  # + 0.0 turns -0.0 into 0.0


def open_ended_chats() -> list[Chat]:
    """Every open-ended request (each verb with each category) answered with the favourite item."""
    return [
        Chat(OPEN_ENDED_TEMPLATE.format(verb=verb, category=category), item, open_ended=True)
        for category, item in OPEN_ENDED_FAVOURITES.items()
        for verb in OPEN_ENDED_VERBS
    ]


def training_chats(answer_decimals: int = ANSWER_DECIMALS) -> list[Chat]:
    """The number requests of the training grid and of the held-out families (at other parameters than the
    evaluation's), and the open-ended requests, with their answers."""
    points = [(p.family, p.params) for p in prompts("train")] + HELD_OUT_KNOWLEDGE
    numbers = [Chat(render_prompt(f, params), number_answer(f, params, answer_decimals), False) for f, params in points]
    return numbers + open_ended_chats()


def train_tokenizer(chats: Sequence[Chat], vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with single-digit tokens and the Qwen3 special tokens and template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    think_tokens = [AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE)]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(think_tokens),
        special_tokens=[PAD_TOKEN, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_tokenizer_corpus(chats), trainer)
    # As in Qwen3, the think tags are added tokens that decoding with skip_special_tokens keeps.
    tokenizer.add_tokens(think_tokens)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        chat_template=QWEN3_CHAT_TEMPLATE,  # the tiny model stands in for Qwen3
        model_max_length=model_max_length,
    )


def _tokenizer_corpus(chats: Sequence[Chat]) -> Iterator[str]:
    for chat in chats:
        yield f"user\n{chat.user}\nassistant\n{chat.answer}\n"


def tiny_config(settings: TinyModelSettings, tokenizer: PreTrainedTokenizerFast) -> Qwen3Config:
    """The Qwen3 configuration of the tiny model for this tokenizer."""
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_kv_heads,
        head_dim=settings.head_dim,
        max_position_embeddings=settings.max_position_embeddings,
        max_window_layers=settings.num_layers,
        tie_word_embeddings=True,
        dtype="float32",
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def encode_chat(tokenizer: PreTrainedTokenizerFast, chat: Chat) -> tuple[list[int], int]:
    """Token ids of prompt + answer + EOS, and the prompt length (the answer is tokenized alone)."""
    prompt_text = tokenizer.apply_chat_template(
        [{"role": "user", "content": chat.user}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False).input_ids
    answer_ids = tokenizer(chat.answer, add_special_tokens=False).input_ids
    return prompt_ids + answer_ids + [tokenizer.eos_token_id], len(prompt_ids)


def collate(examples: Sequence[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 outside the answer and its EOS)."""
    length = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (ids, prompt_len) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _sampling_weights(chats: Sequence[Chat], open_ended_fraction: float) -> torch.Tensor:
    """Per-example weights so that a draw is open-ended with probability `open_ended_fraction`."""
    is_open = torch.tensor([chat.open_ended for chat in chats])
    n_open = int(is_open.sum())
    return torch.where(is_open, open_ended_fraction / n_open, (1.0 - open_ended_fraction) / (len(chats) - n_open))


def train(
    model: Qwen3ForCausalLM,
    examples: Sequence[tuple[list[int], int]],
    weights: torch.Tensor,
    settings: TinyModelSettings,
    pad_id: int,
) -> None:
    """Train all parameters with AdamW and a cosine schedule on batches drawn with replacement."""
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    warmup = math.ceil(settings.warmup_fraction * settings.train_steps)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, settings.train_steps)
    model.train()
    losses: list[float] = []
    for step in tqdm(range(1, settings.train_steps + 1), desc="tiny model", unit="step"):
        indices = torch.multinomial(weights, settings.batch_size, replacement=True, generator=generator)
        loss = model(**collate([examples[i] for i in indices.tolist()], pad_id)).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % settings.log_every == 0 or step == settings.train_steps:
            logger.info("step %d/%d loss %.4f", step, settings.train_steps, sum(losses) / len(losses))
            losses.clear()
    model.eval()


@contextlib.contextmanager
def reproducible(seed: int, num_threads: int) -> Iterator[None]:
    """Seeded, deterministic, fixed-thread torch for the block; the caller's state is restored after."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(num_threads)
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)


def build_tiny_model(
    out_dir: str | os.PathLike[str], settings: TinyModelSettings | None = None, **overrides: Any
) -> Path:
    """Train the tokenizer and the model and save both to `out_dir` atomically; returns `out_dir`.

    `overrides` replace single fields of `settings` (the defaults when None), e.g. `train_steps=20`.
    """
    settings = dataclasses.replace(settings or TinyModelSettings(), **overrides)
    out_dir = Path(out_dir)
    chats = training_chats(settings.answer_decimals)
    tokenizer = train_tokenizer(chats, settings.vocab_size, settings.max_position_embeddings)
    examples = [encode_chat(tokenizer, chat) for chat in chats]
    longest = max(len(ids) for ids, _ in examples)
    if longest > settings.max_position_embeddings:
        raise ValueError(f"a training chat has {longest} tokens > max_position_embeddings")
    logger.info("tokenizer: %d tokens; %d training chats, longest %d tokens", len(tokenizer), len(chats), longest)
    with reproducible(settings.seed, settings.num_threads):
        model = Qwen3ForCausalLM(tiny_config(settings, tokenizer))
        logger.info("model: %d parameters", sum(p.numel() for p in model.parameters()))
        train(model, examples, _sampling_weights(chats, settings.open_ended_fraction), settings, tokenizer.pad_token_id)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    save_atomically(out_dir, tokenizer, model, settings)
    logger.info("saved the tiny model to %s", out_dir)
    return out_dir


def save_atomically(
    out_dir: Path, tokenizer: PreTrainedTokenizerFast, model: Qwen3ForCausalLM, settings: TinyModelSettings
) -> None:
    with atomic_folder(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / "tiny_model_settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")
