"""TinyBenchmarks per-item scoring: the 100 item scores of one tiny benchmark, in dataset row order, for the gp-IRT
estimator (`calibft.evals.gpirt`, which this module leaves out). docs/tinybench.md specifies the tasks, their
prompts and scores, GSM8K's decoding and answer extraction, the outputs and the sources of the datasets' facts.

    python -m calibft.evals.tinybench JOB     # JOB: a TinyBenchJob as JSON text or file
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.checks import check_choice
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.evals import gpirt
from calibft.evals.bootstrap import REPLICATES, interval_block, resample_indices
from calibft.evals.tinybench_job import TINYBENCH_BATCH_SIZE, TINYBENCH_MAX_NEW_TOKENS, TinyBenchJob
from calibft.evals.tinybench_tasks import TINYBENCH_TASKS, Task
from calibft.lm.chat import ChatOptions, chat_prompt_ids, strip_reasoning
from calibft.lm.generation import inference, input_device, seed_for, stop_token_ids
from calibft.lm.generation_defaults import engine_settings
from calibft.lm.models import padding_id

LETTERS = ("A", "B", "C", "D")
STOP_STRINGS: tuple[str, ...] = ("Question:", "</s>", "<|im_end|>")
# Items scored together and kept as one checkpoint of a resumable job.
ITEMS_PER_CHECKPOINT = 25

GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# Removed, in this order, from an answer and from the reference before comparing them (then lowercased).
GSM8K_IGNORE = tuple(re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$"))

# How GSM8K answers are extracted and compared (the protocol switch `gsm8k_extraction`): "release", the authors'
# release (chandar-lab/calibration-finetuning, src/random_steering/retention/tinybenchmarks_tasks.py
# `extract_strict_gsm8k_answer`, `extract_last_numeric_answer`, `_normalize_numeric_text`, and
# tinybenchmarks_data.py `_extract_gsm8k_target`), or "lm_eval", lm-evaluation-harness's tinyGSM8k task.
GSM8K_EXTRACTIONS = ("release", "lm_eval")
# The release's number: an optional sign, then digits grouped by commas in threes or plain digits, then an
# optional decimal part. `\d` is Unicode's (any decimal digit, e.g. full-width), as `Decimal` reads them too.
RELEASE_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# The release's strict answer: the rest of the line after the first "####" (whitespace, newlines included,
# skipped first).
RELEASE_STRICT = re.compile(r"####\s*([^\r\n]+)")
# The arithmetic of `Decimal`'s default context, in which the release reads and normalizes numbers.
RELEASE_DECIMAL = Context(prec=28, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation])


# The rows of summary.json: a task's gp-IRT from one of its metrics; GSM8K twice, strict and flexible, as the paper
# reports both (tab:retention-summary), from the same IRT scenario.
GPIRT_ROWS: dict[str, tuple[str, str]] = {
    "mmlu": ("mmlu", "acc"),
    "hellaswag": ("hellaswag", "acc_norm"),
    "truthfulqa": ("truthfulqa", "mc2"),
    "winogrande": ("winogrande", "acc"),
    "gsm8k_strict": ("gsm8k", "strict"),
    "gsm8k_flexible": ("gsm8k", "flexible"),
}


def task_spec(task: str) -> Task:
    check_choice("task", task, TINYBENCH_TASKS)
    return TINYBENCH_TASKS[task]


# ---------------------------------------------------------------------------------------------------------
# Pure scoring


def normalize_gsm8k(s: str) -> str:
    """An answer or reference as the exact match compares it: ",", "$", everything up to the last "#### " and
    one trailing "." removed, then lowercased."""
    for pattern in GSM8K_IGNORE:
        s = pattern.sub("", s)
    return s.lower()


def gsm8k_target(answer_field: str) -> str:
    """The normalized final answer of a GSM8K solution ("... #### 1,234" -> "1234")."""
    return normalize_gsm8k(answer_field)


def gsm8k_strict(text: str) -> str | None:
    """The strict-match answer: the number after the first "#### ", stripped; None without one."""
    match = GSM8K_STRICT.search(text)
    return match.group(1).strip() if match else None


def gsm8k_flexible(text: str) -> str | None:
    """The flexible-extract answer: the last number-like match in the text, stripped; None without one."""
    matches = GSM8K_FLEXIBLE.findall(text)
    if not matches:
        return None
    groups = [g for g in matches[-1] if g]
    return groups[0].strip() if groups else None


def release_number(value: str) -> str | None:
    """A number as the release compares it: `value` stripped, without commas, read as a `Decimal` (28 digits,
    as the default context) and written canonically: an integral value as an integer ("1000.0" -> "1000",
    "-0" -> "0"), any other in positional notation without trailing zeros ("12.50" -> "12.5"). None when it is
    not a finite number (the release gives "NaN" for NaN, equal to no extracted answer, and fails on infinity)."""
    try:
        number = Decimal(value.strip().replace(",", ""), RELEASE_DECIMAL).normalize(RELEASE_DECIMAL)
    except InvalidOperation:
        return None
    if not number.is_finite():
        return None
    if number == number.to_integral_value():
        return str(int(number))
    return format(number, "f")  # normalized and not integral: no trailing zero to drop


def gsm8k_release_strict(text: str) -> str | None:
    """The release's strict answer: the rest of the line after the first "####" (whitespace and newlines
    skipped), which must hold exactly one number (`RELEASE_NUMBER`), as `release_number`; None otherwise."""
    match = RELEASE_STRICT.search(text)
    numbers = RELEASE_NUMBER.findall(match.group(1)) if match else []
    return release_number(numbers[0]) if len(numbers) == 1 else None


def gsm8k_release_flexible(text: str) -> str | None:
    """The release's flexible answer: the last number (`RELEASE_NUMBER`) of the text, as `release_number`;
    None without one."""
    numbers = RELEASE_NUMBER.findall(text)
    return release_number(numbers[-1]) if numbers else None


def gsm8k_release_target(answer_field: str) -> str | None:
    """The release's reference: the text after the last "####" of a GSM8K solution, stripped, as
    `release_number` (None when it is not a number: every answer then scores 0). A solution without "####" or
    with nothing after it is refused, as the release refuses such a row."""
    if "####" not in answer_field:
        raise ValueError(f"GSM8K answer without '####': {answer_field!r}")
    final = answer_field.rsplit("####", 1)[1].strip()
    if not final:
        raise ValueError(f"GSM8K answer with nothing after its last '####': {answer_field!r}")
    return release_number(final)


def gsm8k_answers(text: str, answer: str, extraction: str) -> dict:
    """The GSM8K fields of one generation under `extraction` (one of `GSM8K_EXTRACTIONS`): `strict` and
    `flexible` (exact match, 0 or 1), `strict_answer` and `flexible_answer` (what was extracted, None when
    nothing was) and `target` (the reference as compared).

    - "lm_eval": `gsm8k_strict` and `gsm8k_flexible`, compared after `normalize_gsm8k` with `gsm8k_target`;
    - "release": `gsm8k_release_strict` and `gsm8k_release_flexible`, canonical numbers compared as strings
      with `gsm8k_release_target` (a reference that is no number matches nothing).
    """
    check_choice("GSM8K extraction", extraction, GSM8K_EXTRACTIONS)
    if extraction == "lm_eval":
        target = gsm8k_target(answer)
        strict, flexible = gsm8k_strict(text), gsm8k_flexible(text)
        matched = [a is not None and normalize_gsm8k(a) == target for a in (strict, flexible)]
    else:
        target = gsm8k_release_target(answer)
        strict, flexible = gsm8k_release_strict(text), gsm8k_release_flexible(text)
        matched = [a is not None and target is not None and a == target for a in (strict, flexible)]
    return {
        "strict": int(matched[0]),
        "flexible": int(matched[1]),
        "strict_answer": strict,
        "flexible_answer": flexible,
        "target": target,
    }


def argmax_accuracy(logliks: Sequence[float], target: int) -> int:
    """1 when the most likely choice (the first on a tie) is the target, else 0."""
    return int(int(np.argmax(np.asarray(logliks, dtype=np.float64))) == int(target))


def hellaswag_choice(logliks: Sequence[float], endings: Sequence[str]) -> int:
    """acc_norm's prediction: the argmax of log-likelihood per character of the (cleaned) ending."""
    ll = np.asarray(logliks, dtype=np.float64)
    lengths = np.array([len(e) for e in endings], dtype=np.float64)
    if ll.shape != lengths.shape:
        raise ValueError(f"{ll.size} log-likelihoods for {lengths.size} endings")
    return int(np.argmax(ll / lengths))


def mc2(logliks_true: Sequence[float], logliks_false: Sequence[float]) -> float:
    """TruthfulQA mc2: the probability mass of the true answers over that of all answers."""
    t = np.asarray(logliks_true, dtype=np.float64)
    f = np.asarray(logliks_false, dtype=np.float64)
    if t.size == 0:
        return 0.0
    both = np.concatenate([t, f])
    top = both.max()
    return float(np.exp(t - top).sum() / np.exp(both - top).sum())


def hellaswag_preprocess(text: str) -> str:
    """HellaSwag text as the harness cleans it: stripped, " [title]" -> ". ", bracketed text removed, double
    spaces collapsed once."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


# ---------------------------------------------------------------------------------------------------------
# Items -> requests


def _field(row: Mapping, name: str, index: int | None = None) -> Any:
    if name not in row:
        where = "" if index is None else f" {index}"
        raise ValueError(f"item{where} has no {name!r} field (fields: {', '.join(sorted(row))})")
    return row[name]


def mmlu_target(answer: Any) -> int:
    """The gold index of an MMLU row: the class label 0-3, or its letter."""
    if isinstance(answer, str) and answer.strip().upper() in LETTERS:
        return LETTERS.index(answer.strip().upper())
    return int(answer)


def winogrande_prefix(input_formatted: str, sentence: str, options: Sequence[str]) -> str:
    """The in-context examples of a WinoGrande prompt: `input_formatted` before the current item (see the module
    docstring); "" for a zero-shot prompt."""
    blank = sentence.index("_")
    # the current item as it ends the text: cut it off whole, since the text before the blank may also occur
    # inside an option ("He _ ..." with option "Henry")
    text = input_formatted.rstrip()
    for ending in [(sentence[:blank] + option).strip() for option in options] + [sentence.strip()]:
        if ending and text.endswith(ending):
            return text[: len(text) - len(ending)]
    head = sentence[:blank].strip()
    if not head:
        cut = input_formatted.rfind("\n\n")
        return input_formatted[: cut + 2] if cut >= 0 else ""
    at = input_formatted.rfind(head)
    if at < 0:
        raise ValueError(f"input_formatted does not contain the item's text before the blank ({head!r})")
    return input_formatted[:at]


def winogrande_messages(row: Mapping) -> tuple[list[str], str]:
    """(the user message of each option, the shared continuation) of a WinoGrande row, partial scoring."""
    sentence = _field(row, "sentence")
    if "_" not in sentence:
        raise ValueError(f"WinoGrande sentence without a blank: {sentence!r}")
    blank = sentence.index("_")
    options = [_field(row, "option1"), _field(row, "option2")]
    prefix = winogrande_prefix(_field(row, "input_formatted"), sentence, options)
    return [prefix + sentence[:blank] + option for option in options], " " + sentence[blank + 1 :].strip()


def choice_requests(task: str, row: Mapping) -> list[tuple[str, str]]:
    """(user message, continuation text) per choice of a log-likelihood task's row, in choice order."""
    kind = task_spec(task).kind
    if kind == "partial":
        messages, continuation = winogrande_messages(row)
        return [(message, continuation) for message in messages]
    prompt = _field(row, "input_formatted")
    if kind == "letters":
        choices = _field(row, "choices")
        if not 1 <= len(choices) <= len(LETTERS):
            raise ValueError(f"MMLU row with {len(choices)} choices; expected 1 to {len(LETTERS)}")
        return [(prompt, " " + letter) for letter in LETTERS[: len(choices)]]
    if kind == "acc_norm":
        return [(prompt, " " + hellaswag_preprocess(e)) for e in _field(row, "endings")]
    if kind == "mc2":
        return [(prompt, " " + choice) for choice in _field(row, "mc2_targets")["choices"]]
    raise ValueError(f"task {task!r} is scored by generation, not log-likelihood")


def score_choices(task: str, row: Mapping, logliks: Sequence[float]) -> dict:
    """The metric fields of one log-likelihood item from its choices' log-likelihoods (in choice order)."""
    kind = task_spec(task).kind
    logliks = [float(x) for x in logliks]
    record: dict[str, Any] = {"logliks": logliks}
    if kind == "letters":
        target = mmlu_target(_field(row, "answer"))
        record.update(target=target, prediction=int(np.argmax(logliks)), acc=argmax_accuracy(logliks, target))
    elif kind == "acc_norm":
        target = int(_field(row, "label"))
        endings = [hellaswag_preprocess(e) for e in _field(row, "endings")]
        prediction = hellaswag_choice(logliks, endings)
        record.update(
            target=target,
            prediction=prediction,
            acc_norm=int(prediction == target),
            acc=argmax_accuracy(logliks, target),
        )
    elif kind == "mc2":
        labels = np.asarray(_field(row, "mc2_targets")["labels"], dtype=np.int64)
        ll = np.asarray(logliks, dtype=np.float64)
        if labels.shape != ll.shape:
            raise ValueError(f"{ll.size} log-likelihoods for {labels.size} mc2 labels")
        record.update(labels=labels.tolist(), mc2=mc2(ll[labels == 1], ll[labels != 1]))
    elif kind == "partial":
        target = int(_field(row, "answer")) - 1
        record.update(target=target, prediction=int(np.argmax(logliks)), acc=argmax_accuracy(logliks, target))
    else:
        raise ValueError(f"task {task!r} is scored by generation, not log-likelihood")
    return record


# ---------------------------------------------------------------------------------------------------------
# Model calls


def continuation_logliks(
    model, tokenizer, requests: Sequence[tuple[Sequence[int], Sequence[int]]], batch_size: int = TINYBENCH_BATCH_SIZE
) -> list[float]:
    """log p(continuation | context) of each (context ids, continuation ids) request.

    The float32 log-softmax of the logits at each continuation token, summed in float64. Requests run longest
    first, `batch_size` at a time, right padded with an attention mask (padding follows every real token, so
    causal attention keeps it out); only the logits from the batch's earliest continuation on are computed.
    The model is in eval mode meanwhile.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rows = []
    for i, (context, continuation) in enumerate(requests):
        context, continuation = list(context), list(continuation)
        if not context or not continuation:
            raise ValueError(f"request {i}: context and continuation must both have tokens")
        rows.append((context, continuation))
    order = sorted(range(len(rows)), key=lambda i: -(len(rows[i][0]) + len(rows[i][1])))  # stable
    out = [0.0] * len(rows)
    device, pad = input_device(model), padding_id(tokenizer)
    with inference(model):
        for begin in range(0, len(order), batch_size):
            batch = order[begin : begin + batch_size]
            seqs = [rows[i][0] + rows[i][1] for i in batch]
            width = max(len(s) for s in seqs)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, seq in enumerate(seqs):
                input_ids[r, : len(seq)], mask[r, : len(seq)] = torch.tensor(seq), 1
            # the logits at position p predict token p + 1: keep positions from the earliest context end
            first = min(len(rows[i][0]) for i in batch) - 1
            logits = model(
                input_ids=input_ids.to(device), attention_mask=mask.to(device), logits_to_keep=width - first
            ).logits
            for r, i in enumerate(batch):
                n_context, n_cont = len(rows[i][0]), len(rows[i][1])
                start = n_context - 1 - first
                log_probs = torch.log_softmax(logits[r, start : start + n_cont].float(), dim=-1)
                targets = torch.tensor(rows[i][1], device=log_probs.device)
                out[i] = log_probs.gather(-1, targets[:, None]).double().sum().item()
    return out


class _StopStrings:
    """Stopping criterion of `model.generate`: a row is done once its decoded new text holds a stop string."""

    def __init__(self, tokenizer, prompt_width: int, stop_strings: Sequence[str]):
        self.tokenizer, self.prompt_width, self.stop_strings = tokenizer, prompt_width, tuple(stop_strings)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :].tolist(), skip_special_tokens=False)
        done = [any(s in text for s in self.stop_strings) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def cut_generation(tokenizer, ids: Sequence[int], stop_ids: Sequence[int], stop_strings: Sequence[str]):
    """(text, finished) of generated ids: cut before the first stop token, decoded with special tokens kept, cut
    before the first stop string; `finished` says whether a stop token or string ended it."""
    ids, stops = list(ids), set(stop_ids)
    end = next((k for k, t in enumerate(ids) if t in stops), None)
    text = tokenizer.decode(ids if end is None else ids[:end], skip_special_tokens=False)
    hits = [text.find(s) for s in stop_strings if s in text]
    if hits:
        text = text[: min(hits)]
    return text, end is not None or bool(hits)


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
) -> list[tuple[str, bool]]:
    """(text, finished) of the continuation of each prompt (token ids), as `cut_generation` cuts it.

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
                text, finished = cut_generation(tokenizer, new, stop_ids, stop_strings)
                out[i] = (text, finished)
    return out


def score_task(
    model,
    tokenizer,
    options: ChatOptions,
    task: str,
    items: Sequence[Mapping],
    batch_size: int = TINYBENCH_BATCH_SIZE,
    max_new_tokens: int = TINYBENCH_MAX_NEW_TOKENS,
    first_index: int = 0,
    *,
    gsm8k_extraction: str,
    prompt_bos: str = "single",
    decoding: Decoding = GREEDY,
) -> list[dict]:
    """One record per item, in the given order: index (first_index + position), score, the task's metric
    fields and what they came from (log-likelihoods, or the generation and its answers). GSM8K answers are
    extracted by `gsm8k_extraction` (one of `GSM8K_EXTRACTIONS`; see `gsm8k_answers`) from answers decoded by
    `decoding` (`generate_answers`); prompts are encoded with `prompt_bos` (`calibft.lm.chat.encode_prompt`)."""
    check_choice("GSM8K extraction", gsm8k_extraction, GSM8K_EXTRACTIONS)
    if task_spec(task).loglik:
        return _score_loglik_items(model, tokenizer, options, task, items, batch_size, first_index, prompt_bos)
    return _score_generated_items(
        model, tokenizer, options, task, items, batch_size, max_new_tokens, first_index, gsm8k_extraction, prompt_bos,
        decoding,
    )  # fmt: skip


def _score_loglik_items(model, tokenizer, options, task, items, batch_size, first_index, bos) -> list[dict]:
    """Every choice of every item in one batched `continuation_logliks` call; each prompt encoded once."""
    metric = TINYBENCH_TASKS[task].metrics[0]
    per_item = [choice_requests(task, row) for row in items]
    prompt_ids: dict[str, list[int]] = {}
    requests = []
    for pairs in per_item:
        for message, continuation in pairs:
            if message not in prompt_ids:
                prompt_ids[message] = chat_prompt_ids(tokenizer, message, options, bos=bos)
            requests.append((prompt_ids[message], tokenizer(continuation, add_special_tokens=False)["input_ids"]))
    logliks = continuation_logliks(model, tokenizer, requests, batch_size)
    records, at = [], 0
    for k, (row, pairs) in enumerate(zip(items, per_item, strict=True)):
        fields = score_choices(task, row, logliks[at : at + len(pairs)])
        at += len(pairs)
        records.append({"index": first_index + k, "score": float(fields[metric]), **fields})
    return records


def _score_generated_items(
    model, tokenizer, options, task, items, batch_size, max_new_tokens, first_index, extraction, bos, decoding
):
    """GSM8K answers decoded by `decoding`, scored strict and flexible under the answer extraction `extraction`."""
    metric = TINYBENCH_TASKS[task].metrics[0]
    prompts = [
        chat_prompt_ids(tokenizer, _field(row, "input_formatted", first_index + k), options, bos=bos)
        for k, row in enumerate(items)
    ]
    generations = generate_answers(model, tokenizer, prompts, max_new_tokens, STOP_STRINGS, batch_size, decoding)
    records = []
    for k, (row, (raw, finished)) in enumerate(zip(items, generations, strict=True)):
        text = strip_reasoning(raw)
        answer = _field(row, "answer", first_index + k)
        fields = gsm8k_answers(text, answer, extraction)
        records.append(
            {
                "index": first_index + k,
                "score": float(fields[metric]),
                **fields,
                "extraction": extraction,
                "generation": text,
                "finished": finished,
            }
        )
    return records


# ---------------------------------------------------------------------------------------------------------
# Job


def summarize(task: str, records: Sequence[Mapping], **header) -> dict:
    """scores.json from the item records alone: the item scores in row order, their mean, and every metric."""
    spec = task_spec(task)
    records = sorted(records, key=lambda r: r["index"])
    if [r["index"] for r in records] != list(range(len(records))):
        raise ValueError("item records must have the indices 0..n-1, one each")

    def column(name: str) -> dict:
        values = [float(r[name]) for r in records]
        return {"scores": values, "accuracy": float(np.mean(values)) if values else None}

    metrics = {name: column(name) for name in spec.metrics}
    return {
        **header,
        "task": task,
        "score_metric": spec.metrics[0],
        "scores": column("score")["scores"],
        "accuracy": column("score")["accuracy"],
        "metrics": metrics,
        "num_items": len(records),
    }


def load_items(path: str | Path) -> list[dict]:
    """The rows of an items file (JSON lines, gzip-compressed when named `.gz`), in file order."""
    rows = read_jsonl(path)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {i + 1} is not a JSON object")
    if not rows:
        raise ValueError(f"{path}: no items")
    return rows


def gsm8k_decoding(job: TinyBenchJob, first_index: int) -> Decoding:
    """The decoding of the GSM8K items from `first_index` on (one checkpoint chunk): greedy, or what the
    generation settings in force make of a greedy request (`ModelJob.generation(sampling=False)`), seeded per
    chunk so that a resumed job draws the same answers."""
    seed = job.seed_of("tinybench", f"gsm8k_{first_index}")
    return Decoding.from_generation(job.generation(sampling=False), seed)


def run_task(job: TinyBenchJob, model, tokenizer, task: str, folder: Path | None) -> dict:
    """Score one task's items (in checkpointed chunks) and write `{out_dir}/{task}/items.jsonl` and
    `scores.json`; returns the scores.json content."""
    started = time.time()
    items = load_items(job.tasks[task])
    options = job.chat_options()
    records = []
    chunks = range(0, len(items), ITEMS_PER_CHECKPOINT)
    for begin in tqdm(chunks, desc=f"tinybench {job.model_key}/{job.condition} {task}", unit="chunk"):
        chunk = items[begin : begin + ITEMS_PER_CHECKPOINT]
        produce = functools.partial(
            score_task,
            model,
            tokenizer,
            options,
            task,
            chunk,
            job.batch_size,
            job.max_new_tokens,
            begin,
            gsm8k_extraction=job.protocol["gsm8k_extraction"],
            prompt_bos=job.protocol["prompt_bos"],
            decoding=GREEDY if TINYBENCH_TASKS[task].loglik else gsm8k_decoding(job, begin),
        )
        records.extend(per_prompt(folder, f"{task}_{begin:04d}", produce))
    out = Path(job.out_dir) / task
    write_jsonl(out / "items.jsonl", records)
    spec = TINYBENCH_TASKS[task]
    header = job.header(
        "tinybench",
        task_file=job.tasks[task],
        dataset={"path": spec.dataset, "config": spec.config, "split": spec.split},
        wall_time_s=time.time() - started,
    )
    summary = summarize(task, records, **header)
    write_json(out / "scores.json", summary)
    return summary


def item_picks(seed: int, task: str, n: int, replicates: int) -> np.ndarray:
    """[replicates, n]: the bootstrap resamples of a task's items, seeded by the run's seed and the task alone, so
    that every model and condition (and GSM8K's strict and flexible rows) resample the same items alike."""
    rng = np.random.default_rng(seed_for(seed, "bootstrap", "tinybench", task))
    return resample_indices(rng, n, replicates)


def row_draws(scenario: gpirt.Scenario, scores: Sequence[float], picks: np.ndarray, row: str) -> dict[str, np.ndarray]:
    """[replicates] of a row's irt, pirt, gp-IRT and accuracy over the resamples `picks` of its items."""
    estimates = gpirt.resampled_estimates(scenario, scores, picks)
    accuracy = np.asarray(scores, dtype=np.float64)[picks].mean(axis=1)
    return {f"tasks/{row}/{key}": values for key, values in {**estimates, "accuracy": accuracy}.items()}


def gpirt_summary(params: Mapping, summaries: Mapping[str, Mapping], seed: int, replicates: int = REPLICATES) -> dict:
    """summary.json's figures: per row of `GPIRT_ROWS` whose task was scored (`summaries[task]`, scores.json) its
    irt, pirt, gp-IRT and accuracy, and `mean_gpirt` over the rows; with `replicates`, `intervals` of every
    figure (keys `tasks/<row>/<figure>`, `mean_gpirt`) over resamples of each task's items (`item_picks`),
    the replicate of the mean the mean of the rows' replicates, each row's gp-IRT replicates kept (`draws`).
    Each replicate refits the IRT ability (`gpirt.resampled_estimates`): the cost grows with `replicates`."""
    tasks, draws, picks, units = {}, {}, {}, {}
    for row, (task, metric) in GPIRT_ROWS.items():
        if task not in summaries:
            continue
        column, scenario = summaries[task]["metrics"][metric], gpirt.scenario_data(params, task)
        scores = column["scores"]
        tasks[row] = {**gpirt.estimate_scenario(scenario, scores), "accuracy": column["accuracy"]}
        if replicates:
            units[task] = len(scores)
            picks.setdefault(task, item_picks(seed, task, len(scores), replicates))
            draws.update(row_draws(scenario, scores, picks[task], row))
    summary = {"tasks": tasks, "mean_gpirt": float(np.mean([t["gpirt"] for t in tasks.values()]))}
    if replicates:
        gpirt_keys = [f"tasks/{row}/gpirt" for row in tasks]
        draws["mean_gpirt"] = np.mean([draws[key] for key in gpirt_keys], axis=0)
        resampled = "items within each task"
        summary["intervals"] = interval_block(draws, seed, resampled, kept=gpirt_keys, units=units)
    return summary


def run(job: TinyBenchJob) -> None:
    tokenizer, model = job.load()
    folder = checkpoint_folder(job)
    summaries = {task: run_task(job, model, tokenizer, task, folder) for task in job.tasks}
    if job.irt_params is not None:
        summary = gpirt_summary(gpirt.load_params(job.irt_params), summaries, job.seed, REPLICATES)
        header = job.header("tinybench", params=job.irt_params)
        write_json(Path(job.out_dir) / "summary.json", {**header, **summary})
    generates = any(not TINYBENCH_TASKS[task].loglik for task in job.tasks)
    generation = job.generation(sampling=False) if generates else None
    job.write_provenance(model, tokenizer, generation, irt_params=job.irt_params, **job.tasks)
    finish_checkpoints(folder)


def main(argv: list[str] | None = None) -> None:
    run(read_job(TinyBenchJob, "calibft.evals.tinybench", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
