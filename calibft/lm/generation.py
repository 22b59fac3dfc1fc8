"""The sampling engine of every evaluation: many answers to one prompt after a single prefill.

Evaluations draw hundreds to thousands of answers per prompt. Calling `model.generate` on the prompt repeated
16 times (the authors' setting) recomputes the prompt for every 16 answers and keeps finished rows in the batch
until the slowest one ends. Here the prompt is run once (batch 1, `use_cache=True`); each decode batch of up to
`batch_size` answers starts from a copy of that KV cache repeated along the batch dimension, samples the first
token from the prefill's logits, and decodes step by step. A row that emits a stop token is finished and leaves
the batch (`DynamicCache.batch_select_indices`), so no step is spent on it. All rows share the prompt, so no
padding or attention mask is needed. The cache is only touched through its own methods (`batch_repeat_interleave`,
`batch_select_indices`, `copy.deepcopy`), which also handle sliding-window layers (Gemma-3).

Sampling is plain ancestral sampling from the float32 softmax of the logits divided by the temperature, with
optional nucleus (top-p) filtering and no top-k, the same distribution as `model.generate(do_sample=True,
top_k=0)`. Tokens are drawn by inverting the cumulative distribution (`draw`) with a `torch.Generator` of the
run's own: the answers depend only on the model, the prompt, the settings and the seed (`seed_for` derives one
per model, condition and prompt), never on the global RNG or on what ran before.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from calibft.core.seeds import seed_for  # noqa: F401  (the engine's seeds; defined without torch)
from calibft.lm.chat import decode_output

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# (float32 logits [rows, vocab], answer indices [rows]) -> next token ids [rows]
Chooser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SamplingSettings:
    """How many answers to draw for one prompt, how long they may get, and the sampling distribution."""

    num_samples: int
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0  # 1: no filtering
    batch_size: int = 1000  # answers decoded together (memory knob; results depend on it only through RNG order)

    def __post_init__(self) -> None:
        if self.num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {self.num_samples}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 (greedy decoding is not sampling), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass
class Generations:
    """The answers to one prompt, in the order they were drawn."""

    token_ids: list[list[int]]  # per answer, generated ids without the stop token
    finished: np.ndarray  # bool per answer: True when it ended with a stop token (False: hit max_new_tokens)


def stop_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids that end an answer: the model's generation-config EOS ids (an int, a list or None) and the tokenizer's.

    Chat models often end a turn with a token other than the tokenizer's EOS (Llama-3's `<|eot_id|>`, GPT-OSS's
    `<|return|>`), which only the generation config lists; the union covers both.
    """
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if eos is not None:
        ids.update([int(eos)] if isinstance(eos, int) else (int(i) for i in eos))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering of each row of `probs` [..., vocab]: the renormalized distribution on its top-p set.

    The set is the most probable tokens whose mass reaches `top_p`: a token stays when the mass of the tokens
    sorted before it is below `top_p`, so the most probable token always stays (as `transformers`'
    `TopPLogitsWarper`, which removes a token when the ascending cumulative mass up to it is <= 1 - top_p).
    """
    if top_p >= 1:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    filtered = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return filtered / filtered.sum(dim=-1, keepdim=True)


class NonFiniteProbabilities(ValueError):
    """Next-token probabilities that are not a distribution: the model's logits are NaN or infinite."""


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of `probs` [rows, vocab] (non-negative, not necessarily normalized).

    Inverse-CDF sampling: one uniform per row, located in the row's cumulative sums. `torch.multinomial` draws
    an exponential for every vocabulary entry instead, which made it the largest cost of a decode step on the
    CPU (twice the engine's time on the tiny model). The sums are float64, so that tokens far below float32's
    resolution near 1 (~6e-8) keep their mass; that copy takes 8 bytes per row and vocabulary entry, part of
    what `batch_size` bounds. The point is kept strictly below the row's total, so a zero-probability token
    (top-p filtered, or underflowed in the softmax) can never be drawn. A row with no finite positive total (NaN
    or infinite logits) raises `NonFiniteProbabilities`, where searchsorted would give an id past the vocabulary.
    """
    cdf = cumulative(probs)
    total = cdf[:, -1:]
    valid = torch.isfinite(total) & (total > 0)
    if not bool(valid.all()):
        raise NonFiniteProbabilities(
            f"{int((~valid).sum())} of {len(total)} rows of next-token probabilities are NaN, infinite or all zero: "
            f"the model's logits are not finite, as a model or adapter with non-finite weights (a diverged "
            f"training run) or an overflow in the model's dtype gives; nothing can be sampled from them"
        )
    uniform = torch.rand(total.shape, dtype=torch.float64, generator=generator, device=probs.device)
    point = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, point, right=True).squeeze(1)


def cumulative(probs: torch.Tensor) -> torch.Tensor:
    """float64 cumulative sums of each row of `probs` [rows, vocab], which `draw` locates its points in."""
    return probs.to(torch.float64).cumsum(dim=-1)


def next_token_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """float32 [rows, vocab]: softmax(logits / temperature), top-p filtered."""
    return top_p_filter(torch.softmax(logits.float() / temperature, dim=-1), top_p)


def sampler(temperature: float, top_p: float, generator: torch.Generator) -> Chooser:
    """The chooser that draws each row's next token from softmax(logits / temperature), top-p filtered."""

    def choose(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return draw(next_token_probs(logits, temperature, top_p), generator)

    return choose


def input_device(model: Any) -> torch.device:
    """Where the model's inputs go: the device of its input embeddings (also right for a PEFT wrapper)."""
    return model.get_input_embeddings().weight.device


@contextlib.contextmanager
def inference(model: Any) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the block; the model's own mode comes back after it."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def decode(
    model: Any,
    prompt_ids: Sequence[int],
    num_answers: int,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    choose: Chooser,
    batch_size: int = 1000,
    progress: bool = False,
) -> Generations:
    """`num_answers` continuations of one prompt after a single prefill, each token picked by `choose`.

    `choose(logits, rows)` gets the float32 next-token logits of the active rows and their answer indices, and
    returns one token id per row; `sample` passes a seeded sampler, tests pass deterministic choosers to check the
    cache handling against a recomputation. Decode batches of up to `batch_size` answers run one after another.
    """
    device = input_device(model)
    stops = torch.tensor(sorted({int(i) for i in stop_ids}), dtype=torch.long, device=device)
    tokens = torch.zeros((num_answers, max_new_tokens), dtype=torch.long, device=device)
    lengths = torch.full((num_answers,), max_new_tokens, dtype=torch.long, device=device)
    with inference(model):
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
        prefill_cache, prefill_logits = prefill(model, prompt)
        with tqdm(total=num_answers, desc="answers", unit="answer", disable=not progress) as bar:
            for start in range(0, num_answers, batch_size):
                rows = torch.arange(start, min(start + batch_size, num_answers), device=device)
                _decode_batch(model, prefill_cache, prefill_logits, rows, tokens, lengths, stops, choose)
                bar.update(len(rows))
    lengths_host = lengths.tolist()
    return Generations(
        token_ids=[row[:n] for row, n in zip(tokens.tolist(), lengths_host, strict=True)],
        finished=np.array([n < max_new_tokens for n in lengths_host], dtype=bool),
    )


def prefill(model: Any, prompt: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """The prompt [1, length] run once: its KV cache and the float32 [1, vocab] logits after it."""
    out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[:, -1].float()


def batch_cache(prefill_cache: Any, rows: int) -> Any:
    """A copy of the prompt's cache (the next decode batch needs it intact), repeated once per row."""
    cache = copy.deepcopy(prefill_cache)
    cache.batch_repeat_interleave(rows)
    return cache


def decode_step(model: Any, next_ids: torch.Tensor, cache: Any) -> torch.Tensor:
    """Feed each row's token `next_ids` [rows] on top of its cache (which grows by it): the float32 [rows, vocab]
    logits after it."""
    return model(input_ids=next_ids[:, None], past_key_values=cache, use_cache=True).logits[:, -1].float()


def largest_decode_step(
    model: Any, prompt_length: int, max_new_tokens: int, batch_size: int, temperature: float = 1.0, top_p: float = 1.0
) -> None:
    """The engine's largest step, on token ids of zeros on the model's device (the meta device for the memory
    estimate): a prompt prefilled, its cache copied for `batch_size` rows, and the last decode step of answers
    of `max_new_tokens` tokens, which feeds their last token but one after the prompt and the tokens before it,
    up to the float64 sums that the last draw takes (`draw` reads them then). The cache is prefilled to that
    length at once."""
    device = input_device(model)
    cached = prompt_length + max(max_new_tokens - 2, 0)
    cache, _ = prefill(model, torch.zeros(1, cached, dtype=torch.long, device=device))
    cache = batch_cache(cache, batch_size)
    logits = decode_step(model, torch.zeros(batch_size, dtype=torch.long, device=device), cache)
    cumulative(next_token_probs(logits, temperature, top_p))


def _decode_batch(
    model: Any,
    prefill_cache: Any,
    prefill_logits: torch.Tensor,
    rows: torch.Tensor,
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    stops: torch.Tensor,
    choose: Chooser,
) -> None:
    """Decode the answers `rows` into `tokens`, and set `lengths` of those that stop before the last step.

    The prefill cache is copied (the next batch needs it intact) and repeated once per row; the first token of
    every row comes from the prefill's logits. Finished rows are dropped from the cache and the active set.
    """
    cache = batch_cache(prefill_cache, len(rows))
    logits = prefill_logits.expand(len(rows), -1)
    max_new_tokens = tokens.shape[1]
    for step in range(max_new_tokens):
        next_ids = choose(logits, rows)
        tokens[rows, step] = next_ids
        stopped = torch.isin(next_ids, stops)
        if stopped.any():
            lengths[rows[stopped]] = step
            keep = (~stopped).nonzero().squeeze(1)
            if len(keep) == 0:
                return
            rows, next_ids = rows[keep], next_ids[keep]
            cache.batch_select_indices(keep)
        if step == max_new_tokens - 1:
            return
        logits = decode_step(model, next_ids, cache)


def sample(
    model: Any,
    prompt_ids: Sequence[int],
    settings: SamplingSettings,
    stop_ids: Sequence[int],
    seed: int,
    progress: bool = False,
) -> Generations:
    """`settings.num_samples` sampled answers to one prompt; the same seed and settings give the same answers."""
    generator = torch.Generator(device=input_device(model)).manual_seed(seed)
    return decode(
        model,
        prompt_ids,
        settings.num_samples,
        settings.max_new_tokens,
        stop_ids,
        sampler(settings.temperature, settings.top_p, generator),
        settings.batch_size,
        progress,
    )


def sample_texts(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    settings: SamplingSettings,
    seed: int,
    stop_ids: Sequence[int] | None = None,
    progress: bool = False,
    reasoning: str = "strip_reasoning",
) -> tuple[list[str], np.ndarray]:
    """Sampled answers as text (`decode_output`: special tokens skipped, reasoning stripped or, under `reasoning`
    `release`, kept) and `finished`.

    `stop_ids` defaults to `stop_token_ids(model, tokenizer)`.
    """
    stops = stop_token_ids(model, tokenizer) if stop_ids is None else stop_ids
    generations = sample(model, prompt_ids, settings, stops, seed, progress)
    return [decode_output(tokenizer, ids, reasoning) for ids in generations.token_ids], generations.finished
