"""Chat formatting of prompts and cleaning of outputs, for every model family (docs/method.md, Chat formatting).

Everything that differs between families lives in the model's `chat:` entry of `config.yaml`, read into
`ChatOptions`; no code path looks at a model's name:

- `template_kwargs`: keyword arguments of the tokenizer's chat template (Qwen3 `enable_thinking: false`,
  GPT-OSS `reasoning_effort: low`).
- `assistant_prefix`: text appended after the generation prompt, where the assistant's turn starts (GPT-OSS
  `<|channel|>final<|message|>`, so that generation starts in the final channel).
- `system`: a default system message (none for the paper's models; evaluations such as the SSOT baseline
  pass their own).
- `date`: the day ("YYYY-MM-DD") that a template printing the current date through `strftime_now` sees
  instead of the clock (GPT-OSS's "Current date", Llama-3.2's "Today Date"), so that a prompt is the same on
  every day, and a training run resumed after midnight keeps its prompts. Protocol switch `chat_date:
  run_day` drops it (`on_chat_date`): the template prints the day it runs, as the release's prompts did.

A formatted prompt is tokenized so that a BOS the template already wrote is not added a second time, or, as
the authors' release does, with the tokenizer's special tokens added anyway (`encode_prompt`). Completions are
tokenized alone, without special tokens, with the tokenizer's EOS appended: that is `calibft.data.trie.tokenize_values`,
which serves training and the tries alike. Outputs are decoded with special tokens skipped and cleaned of
reasoning traces by `strip_reasoning`, or, under protocol switch `answer_reasoning: release`, left with their
reasoning for the authors' release's rules (`strip_thinking_trace`, `strip_think_tags`, `strip_model_response`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from calibft.core.checks import check_choice
from calibft.core.protocol import SWITCH

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Names that `format_prompt` passes to `apply_chat_template` itself, or that would change what it returns.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {"conversation", "messages", "add_generation_prompt", "continue_final_message", "tokenize", "return_dict"}
)


@dataclass(frozen=True)
class ChatOptions:
    """How one model formats a prompt: its `chat:` entry in `config.yaml`."""

    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    assistant_prefix: str = ""
    system: str | None = None
    date: str | None = None

    @classmethod
    def from_config(cls, entry: Mapping[str, Any] | None, where: str = "chat") -> ChatOptions:
        """Options from a `chat:` mapping; `where` names it in error messages (e.g. `models.qwen3_8b.chat`)."""
        return cls().merged(entry or {}, where)

    def merged(self, overrides: Mapping[str, Any], where: str = "chat") -> ChatOptions:
        """A copy with `overrides` (same keys as a `chat:` entry) applied; template kwargs are merged key by key.

        For example the SSOT baseline turns Qwen3's thinking on with `{"template_kwargs": {"enable_thinking": True}}`.
        """
        if not isinstance(overrides, Mapping):
            raise ValueError(f"{where} must be a mapping, got {type(overrides).__name__}")
        known = [f.name for f in fields(self)]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(
                f"{where}: unknown key {unknown[0]!r} (known: {', '.join(known)}); "
                "keyword arguments of the chat template go under `template_kwargs`"
            )
        kwargs = overrides.get("template_kwargs", {})
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ValueError(f"{where}.template_kwargs must be a mapping with string keys, got {kwargs!r}")
        reserved = sorted(RESERVED_TEMPLATE_KWARGS.intersection(kwargs))
        if reserved:
            raise ValueError(f"{where}.template_kwargs may not set {reserved[0]!r}: format_prompt sets it")
        prefix = overrides.get("assistant_prefix", self.assistant_prefix)
        if not isinstance(prefix, str):
            raise ValueError(f"{where}.assistant_prefix must be a string, got {prefix!r}")
        system = overrides.get("system", self.system)
        if system is not None and not isinstance(system, str):
            raise ValueError(f"{where}.system must be a string or null, got {system!r}")
        date = overrides.get("date", self.date)
        if date is not None:
            try:
                dt.date.fromisoformat(date)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.date must be a day written YYYY-MM-DD, got {date!r}") from None
        return ChatOptions({**self.template_kwargs, **kwargs}, prefix, system, date)


def on_chat_date(options: ChatOptions, chat_date: str) -> ChatOptions:
    """`options` under protocol switch `chat_date`: `pinned` as they are, `run_day` without their `date`."""
    allowed = SWITCH["chat_date"].values
    if chat_date not in allowed:
        raise ValueError(f"chat_date must be one of {', '.join(allowed)}, got {chat_date!r}")
    return options if chat_date == "pinned" else replace(options, date=None)


def format_prompt(
    tokenizer: PreTrainedTokenizerBase, user_message: str, options: ChatOptions, system: str | None = None
) -> str:
    """The chat-formatted text of one user message (after an optional system message), ready for generation.

    `system` replaces the options' default system message. The template renders the generation prompt
    with the options' keyword arguments; the assistant prefix follows it.
    """
    system = system if system is not None else options.system
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user_message}
    ]
    with _templates_see_day(options.date):
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **dict(options.template_kwargs)
        )
    return text + options.assistant_prefix


@contextlib.contextmanager
def _templates_see_day(day: str | None) -> Iterator[None]:
    """Within the block, `strftime_now` of chat templates formats `day` (at midnight) instead of the clock.

    transformers gives templates no way to pass a date in (keyword arguments reach them as plain data, not
    functions), and its `strftime_now` reads the clock through the module's `datetime`, which is swapped here.
    """
    if day is None:
        yield
        return
    from transformers.utils import chat_template_utils

    pinned = dt.datetime.fromisoformat(day)

    class PinnedDay(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return pinned

    clock = chat_template_utils.datetime
    chat_template_utils.datetime = PinnedDay
    try:
        yield
    finally:
        chat_template_utils.datetime = clock


PROMPT_BOS = ("single", "doubled")


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, bos: str = "single") -> list[int]:
    """Token ids of a formatted prompt.

    `single`: when the text already starts with the tokenizer's BOS (Gemma-3, Llama-3.2 templates write it), it
    is encoded as it is; otherwise the tokenizer adds what it normally adds (nothing for Qwen3 and GPT-OSS).
    `doubled`: the tokenizer adds its special tokens whatever the text holds, as the authors' release encodes
    prompts: two BOS where the template wrote one (the `prompt_bos` switch of `calibft.core.protocol`).
    """
    if bos not in PROMPT_BOS:
        raise ValueError(f"bos must be one of {PROMPT_BOS}, got {bos!r}")
    first = tokenizer.bos_token
    already_there = bos == "single" and bool(first) and text.startswith(first)
    return list(tokenizer(text, add_special_tokens=not already_there)["input_ids"])


def chat_prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    user_message: str,
    options: ChatOptions,
    system: str | None = None,
    bos: str = "single",
) -> list[int]:
    """`encode_prompt` of `format_prompt`: the ids a model is prompted with."""
    return encode_prompt(tokenizer, format_prompt(tokenizer, user_message, options, system), bos)


def decode_output(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], reasoning: str = "strip_reasoning") -> str:
    """Generated ids as the text an evaluation reads: decoded with special tokens skipped, surrounding whitespace
    stripped, and cleaned of reasoning by `reasoning`, a value of protocol switch `answer_reasoning`:
    `strip_reasoning` by `strip_reasoning`; `release` not at all, as the release's HF backend hands its text on
    (inference/hf_backend.py, lines 163-164), for the evaluation's own rule of the release."""
    check_choice("answer_reasoning", reasoning, SWITCH["answer_reasoning"].values)
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    return strip_reasoning(text) if reasoning == "strip_reasoning" else text.strip()


# The release's patterns, think tags in any case: blocks and an unclosed one (src/random_steering/inference/
# chat_format.py, lines 8-9), single tags (mcq_gen/parser.py line 10, open_random_gen/metrics.py line 11).
_RELEASE_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_RELEASE_UNCLOSED_THINK = re.compile(r"<think>.*$", re.DOTALL | re.IGNORECASE)
RELEASE_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)


def strip_thinking_trace(text: str) -> str:
    """The release's `strip_thinking_trace` (inference/chat_format.py, lines 25-28): `<think>...</think>` blocks
    removed, then everything from a `<think>` left unclosed on, tags in any case; surrounding whitespace stripped.
    A `</think>` without its opening tag stays, with what precedes it."""
    return _RELEASE_UNCLOSED_THINK.sub("", _RELEASE_THINK_BLOCK.sub("", text)).strip()


def strip_think_tags(text: str) -> str:
    """`strip_thinking_trace`, then every `<think>` or `</think>` left deleted where it stands (any case), stripped:
    how the release cleans an MCQ generation (mcq_gen/parser.py `_clean_generation_text`, lines 18-21) and an
    open-ended answer (open_random_gen/metrics.py, lines 38-39). "Rome</think>Milan" is "RomeMilan"."""
    return RELEASE_THINK_TAG.sub("", strip_thinking_trace(text)).strip()


def strip_model_response(text: str, strips_thinking: bool) -> str:
    """The release's `strip_model_response` (inference/chat_format.py, lines 31-35), what its backends apply before
    SSOT extraction and GSM8K: `strip_thinking_trace` for a model of its Qwen3 family (`strips_thinking`, a model
    entry's `release_strips_thinking`), surrounding whitespace stripped for every other."""
    return strip_thinking_trace(text) if strips_thinking else text.strip()


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_HARMONY_FINAL = "<|channel|>final<|message|>"
# What ends a harmony message (or starts the next one).
_HARMONY_MESSAGE_END = re.compile(r"<\|(?:end|return|call|start|channel)\|>")
# GPT-OSS output decoded with special tokens skipped: "analysis<reasoning>assistantfinal<answer>".
_HARMONY_SKIPPED = re.compile(r"\A\s*analysis.*assistantfinal", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """The answer in a model output, without reasoning traces or surrounding whitespace.

    - `<think>...</think>` blocks are removed; from an unclosed `<think>` on, everything is removed; text up
      to a `</think>` left without its opening tag (the template prefilled it) is removed.
    - Harmony (GPT-OSS) with its tokens kept: only the content of the last final-channel message stays,
      i.e. the text after the last `<|channel|>final<|message|>` up to the next `<|end|>`, `<|return|>`,
      `<|call|>`, `<|start|>` or `<|channel|>`. Without a final-channel marker (generation started in the
      final channel) the text up to such a token stays, so an analysis message without a final answer
      leaves nothing.
    - Harmony decoded with special tokens skipped: text that starts with `analysis` and contains
      `assistantfinal` keeps what follows the last `assistantfinal`. Text without `assistantfinal` is kept
      as it is, since a reply may start with the word "analysis".
    """
    text = _THINK_BLOCK.sub("", text)
    if "<think>" in text:
        text = text[: text.index("<think>")]
    if "</think>" in text:
        text = text[text.rindex("</think>") + len("</think>") :]
    if _HARMONY_FINAL in text:
        text = text[text.rindex(_HARMONY_FINAL) + len(_HARMONY_FINAL) :]
    end = _HARMONY_MESSAGE_END.search(text)
    if end:
        text = text[: end.start()]
    skipped = _HARMONY_SKIPPED.match(text)
    if skipped:
        text = text[skipped.end() :]
    return text.strip()
