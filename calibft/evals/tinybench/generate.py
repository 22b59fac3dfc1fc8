"""GSM8K's decoding (docs/tinybench.md, GSM8K): how answers are decoded (`Decoding`, greedy or sampled,
seeded per batch), `generate_answers` with the stop strings `STOP_STRINGS`, and `cut_generation`, which cuts a
generation at its first stop token or stop string and decodes it as protocol switch `answer_reasoning` reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from calibft.core.checks import check_choice
from calibft.core.protocol import SWITCH
from calibft.evals.tinybench.job import TINYBENCH_BATCH_SIZE, TINYBENCH_MAX_NEW_TOKENS
from calibft.lm.generation import inference, input_device, seed_for, stop_token_ids
from calibft.lm.generation_defaults import engine_settings
from calibft.lm.models import padding_id

STOP_STRINGS: tuple[str, ...] = ("Question:", "</s>", "<|im_end|>")


class _StopStrings:
    """Stopping criterion of `model.generate`: a row is done once its decoded new text holds a stop string."""

    def __init__(self, tokenizer, prompt_width: int, stop_strings: Sequence[str]):
        self.tokenizer, self.prompt_width, self.stop_strings = tokenizer, prompt_width, tuple(stop_strings)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :].tolist(), skip_special_tokens=False)
        done = [any(s in text for s in self.stop_strings) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def cut_generation(
    tokenizer,
    ids: Sequence[int],
    stop_ids: Sequence[int],
    stop_strings: Sequence[str],
    reasoning: str = "strip_reasoning",
) -> tuple[str, bool]:
    """(text, finished) of generated ids: cut before the first stop token, decoded, cut before the first stop
    string; `finished` says whether a stop token or a stop string in the text with special tokens kept (what
    `generate_answers` stops on) ended it.

    The text is decoded as `reasoning`, a value of protocol switch `answer_reasoning`, reads it: `strip_reasoning`
    with special tokens kept (`calibft.lm.chat.strip_reasoning` reads GPT-OSS's channel tokens), `release` with
    them skipped before the stop strings cut it, as the release's HF backend does (inference/hf_backend.py, lines
    163-164).
    """
    check_choice("answer_reasoning", reasoning, SWITCH["answer_reasoning"].values)
    ids, stops = list(ids), set(stop_ids)
    end = next((k for k, t in enumerate(ids) if t in stops), None)
    ids = ids if end is None else ids[:end]
    text, cut = _cut_at_stop_strings(tokenizer.decode(ids, skip_special_tokens=False), stop_strings)
    if reasoning == "release":
        text, _ = _cut_at_stop_strings(tokenizer.decode(ids, skip_special_tokens=True), stop_strings)
    return text, end is not None or cut


def _cut_at_stop_strings(text: str, stop_strings: Sequence[str]) -> tuple[str, bool]:
    """`text` up to its first stop string, and whether it held one."""
    hits = [text.find(s) for s in stop_strings if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


@dataclass(frozen=True)
class Decoding:
    """How GSM8K answers are decoded: greedy, or (`do_sample`) sampled with these warpers, each batch of prompts
    from its own seed derived from `seed`. `top_k` None means no top-k filtering."""

    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int = 0

    @classmethod
    def from_generation(cls, generation: Mapping[str, Any], seed: int) -> Decoding:
        """The decoding of generation settings in force (`ModelJob.generation`, `engine_settings`)."""
        do_sample, temperature, top_p, top_k = engine_settings(generation)
        return cls(do_sample, temperature, top_p, top_k, seed)

    def generate_kwargs(self) -> dict[str, Any]:
        """The arguments of `model.generate` that fix the decoding, every warper given explicitly so that none
        comes from the model's own generation config."""
        if not self.do_sample:
            return {"do_sample": False}
        top_k = 0 if self.top_k is None else self.top_k
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": top_k}


GREEDY = Decoding()


def generate_answers(
    model,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = TINYBENCH_MAX_NEW_TOKENS,
    stop_strings: Sequence[str] = STOP_STRINGS,
    batch_size: int = TINYBENCH_BATCH_SIZE,
    decoding: Decoding = GREEDY,
    reasoning: str = "strip_reasoning",
) -> list[tuple[str, bool]]:
    """(text, finished) of the continuation of each prompt (token ids), as `cut_generation` cuts and decodes it
    under `reasoning` (protocol switch `answer_reasoning`).

    `model.generate` with `decoding`'s settings, `batch_size` prompts at a time (longest first), left padded with
    an attention mask; generation stops at the model's stop tokens (`stop_token_ids`), at `max_new_tokens`, or
    once a stop string appears in the decoded text. No repetition penalty (set to 1 against a model default).
    When sampling, batch b draws from the global RNG seeded with `seed_for(decoding.seed, b)` (as the release
    seeds each batch), inside `torch.random.fork_rng` so that the caller's RNG state is left as it was.
    """
    from transformers import StoppingCriteriaList

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    stop_ids = stop_token_ids(model, tokenizer)
    device, pad = input_device(model), padding_id(tokenizer)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    out: list[tuple[str, bool]] = [("", False)] * len(prompts)
    with inference(model), torch.random.fork_rng(enabled=decoding.do_sample):
        for number, begin in enumerate(range(0, len(order), batch_size)):
            batch = order[begin : begin + batch_size]
            width = max(len(prompts[i]) for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                n = len(prompts[i])
                input_ids[r, width - n :], mask[r, width - n :] = torch.tensor(list(prompts[i])), 1
            if decoding.do_sample:
                torch.manual_seed(seed_for(decoding.seed, number))
            generated = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                **decoding.generate_kwargs(),
                num_beams=1,
                repetition_penalty=1.0,
                max_new_tokens=max_new_tokens,
                eos_token_id=stop_ids,
                pad_token_id=pad,
                stopping_criteria=StoppingCriteriaList([_StopStrings(tokenizer, width, stop_strings)]),
            )
            for r, i in enumerate(batch):
                new = generated[r, width:].tolist()
                text, finished = cut_generation(tokenizer, new, stop_ids, stop_strings, reasoning)
                out[i] = (text, finished)
    return out
