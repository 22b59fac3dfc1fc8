"""The log-likelihood tasks (MMLU, HellaSwag, TruthfulQA mc2, WinoGrande; docs/tinybench.md, Log-likelihood
tasks): the (user message, continuation) request of each choice of an item (`choice_requests`, its text built by
the `tinybench_text` switch's rules), its token ids
(`joint_request`: prompt and continuation encoded together), the log-likelihood of each continuation under the
model (`continuation_logliks`, in the arithmetic `continuation_loglik` chooses by the `numerics` switch), and the
item's metric fields from those log-likelihoods (`score_choices`, with the per-task rules `argmax_accuracy`,
`hellaswag_choice`, `mc2`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from calibft.core.checks import check_choice
from calibft.evals.tinybench.job import TINYBENCH_BATCH_SIZE
from calibft.evals.tinybench.tasks import item_field, task_spec
from calibft.lm.chat import encode_prompt
from calibft.lm.generation import inference, input_device
from calibft.lm.models import padding_id

LETTERS = ("A", "B", "C", "D")
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol
TEXT_RULES = ("release", "lm_eval")  # the `tinybench_text` switch of calibft.core.protocol
# what the release takes for a context's end or a continuation's start that needs no space between them
RELEASE_SPACES = (" ", "\n", "\t")


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


def hellaswag_preprocess(text: str, text_rule: str = "lm_eval") -> str:
    """HellaSwag text cleaned: stripped, " [title]" -> ". ", bracketed text removed, double spaces collapsed
    once. A bracketed span runs from "[" to the next "]" on the same line under `lm_eval` (the harness's regex,
    whose "." stops at a newline), or across lines under `release` (the release's loop of `find`s)."""
    check_choice("tinybench_text", text_rule, TEXT_RULES)
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text, flags=re.DOTALL if text_rule == "release" else 0)
    return text.replace("  ", " ")


def continuation_text(context: str, text: str, text_rule: str) -> str:
    """The continuation of `text` scored after the user message `context`. `lm_eval`: the harness's target
    delimiter " " before `text`. `release`: `text` as it is where `context` ends or `text` starts with a space,
    newline or tab, else " " before it; an empty `text` is refused, as the release refuses it."""
    check_choice("tinybench_text", text_rule, TEXT_RULES)
    if text_rule == "lm_eval":
        return " " + text
    if not text:
        raise ValueError(f"empty continuation after {context[-40:]!r}")
    return text if context.endswith(RELEASE_SPACES) or text.startswith(RELEASE_SPACES) else " " + text


def mmlu_target(answer: Any) -> int:
    """The gold index of an MMLU row: the class label 0-3, or its letter."""
    if isinstance(answer, str) and answer.strip().upper() in LETTERS:
        return LETTERS.index(answer.strip().upper())
    return int(answer)


def winogrande_prefix(input_formatted: str, sentence: str, options: Sequence[str]) -> str:
    """The in-context examples of a WinoGrande prompt: `input_formatted` before the current item (see
    docs/tinybench.md, WinoGrande); "" for a zero-shot prompt."""
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
    """(the user message of each option, the shared continuation) of a WinoGrande row, partial scoring, as the
    harness builds them."""
    sentence = _winogrande_sentence(row)
    blank = sentence.index("_")
    options = [item_field(row, "option1"), item_field(row, "option2")]
    prefix = winogrande_prefix(item_field(row, "input_formatted"), sentence, options)
    return [prefix + sentence[:blank] + option for option in options], " " + sentence[blank + 1 :].strip()


def release_winogrande_requests(row: Mapping) -> list[tuple[str, str]]:
    """(user message, continuation) of each option of a WinoGrande row as the release builds them: the message is
    `input_formatted` without the longest option it ends with, followed by the option; the continuation the
    sentence after the blank, stripped, after it by `continuation_text`. ValueError unless `input_formatted` ends
    with the gold option, which the release refuses too."""
    sentence, text = _winogrande_sentence(row), item_field(row, "input_formatted")
    options = [item_field(row, "option1"), item_field(row, "option2")]
    gold = options[int(item_field(row, "answer")) - 1]
    if not text.endswith(gold):
        raise ValueError(f"input_formatted does not end with the gold option {gold!r}")
    # sorted is stable: of two options of one length, option1 is tried first, as in the release
    cut = next(len(option) for option in sorted(options, key=len, reverse=True) if text.endswith(option))
    rest = sentence[sentence.index("_") + 1 :].strip()
    messages = [text[: len(text) - cut] + option for option in options]
    return [(message, continuation_text(message, rest, "release")) for message in messages]


def _winogrande_sentence(row: Mapping) -> str:
    sentence = item_field(row, "sentence")
    if "_" not in sentence:
        raise ValueError(f"WinoGrande sentence without a blank: {sentence!r}")
    return sentence


def choice_requests(task: str, row: Mapping, text_rule: str = "lm_eval") -> list[tuple[str, str]]:
    """(user message, continuation text) per choice of a log-likelihood task's row, in choice order, built by
    `text_rule` (one of `TEXT_RULES`): each continuation after its message by `continuation_text`, HellaSwag's
    endings cleaned by `hellaswag_preprocess`; WinoGrande's requests by `winogrande_messages` (`lm_eval`) or
    `release_winogrande_requests`."""
    check_choice("tinybench_text", text_rule, TEXT_RULES)
    kind = task_spec(task).kind
    if kind == "partial" and text_rule == "release":
        return release_winogrande_requests(row)
    if kind == "partial":
        messages, continuation = winogrande_messages(row)
        return [(message, continuation) for message in messages]
    prompt = item_field(row, "input_formatted")
    if kind == "letters":
        choices = item_field(row, "choices")
        if not 1 <= len(choices) <= len(LETTERS):
            raise ValueError(f"MMLU row with {len(choices)} choices; expected 1 to {len(LETTERS)}")
        texts = list(LETTERS[: len(choices)])
    elif kind == "acc_norm":
        texts = [hellaswag_preprocess(ending, text_rule) for ending in item_field(row, "endings")]
    elif kind == "mc2":
        texts = list(item_field(row, "mc2_targets")["choices"])
    else:
        raise ValueError(f"task {task!r} is scored by generation, not log-likelihood")
    return [(prompt, continuation_text(prompt, text, text_rule)) for text in texts]


def score_choices(task: str, row: Mapping, logliks: Sequence[float], text_rule: str = "lm_eval") -> dict:
    """The metric fields of one log-likelihood item from its choices' log-likelihoods (in choice order); HellaSwag's
    endings cleaned under `text_rule` for acc_norm's lengths."""
    kind = task_spec(task).kind
    logliks = [float(x) for x in logliks]
    record: dict[str, Any] = {"logliks": logliks}
    if kind == "letters":
        target = mmlu_target(item_field(row, "answer"))
        record.update(target=target, prediction=int(np.argmax(logliks)), acc=argmax_accuracy(logliks, target))
    elif kind == "acc_norm":
        target = int(item_field(row, "label"))
        endings = [hellaswag_preprocess(e, text_rule) for e in item_field(row, "endings")]
        prediction = hellaswag_choice(logliks, endings)
        record.update(
            target=target,
            prediction=prediction,
            acc_norm=int(prediction == target),
            acc=argmax_accuracy(logliks, target),
        )
    elif kind == "mc2":
        labels = np.asarray(item_field(row, "mc2_targets")["labels"], dtype=np.int64)
        ll = np.asarray(logliks, dtype=np.float64)
        if labels.shape != ll.shape:
            raise ValueError(f"{ll.size} log-likelihoods for {labels.size} mc2 labels")
        record.update(labels=labels.tolist(), mc2=mc2(ll[labels == 1], ll[labels != 1]))
    elif kind == "partial":
        target = int(item_field(row, "answer")) - 1
        record.update(target=target, prediction=int(np.argmax(logliks)), acc=argmax_accuracy(logliks, target))
    else:
        raise ValueError(f"task {task!r} is scored by generation, not log-likelihood")
    return record


def joint_request(tokenizer, prompt: str, continuation: str, bos: str = "single") -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) of a formatted prompt and a continuation text.

    `prompt + continuation` is encoded as one text (`encode_prompt` with `bos`) and cut after as many ids as
    `prompt` encoded alone has: the context is the head, the continuation the tail. Where a token would span
    the boundary, the cut falls by that count all the same. ValueError when the tail is empty.
    """
    n_prompt = len(encode_prompt(tokenizer, prompt, bos))
    joint = encode_prompt(tokenizer, prompt + continuation, bos)
    if len(joint) <= n_prompt:
        raise ValueError(f"continuation {continuation!r} adds no token to the prompt's {n_prompt}")
    return joint[:n_prompt], joint[n_prompt:]


def continuation_loglik(logits: torch.Tensor, targets: torch.Tensor, numerics: str = "fp32") -> float:
    """The summed log-probability of `targets` (n ids) under `logits` (n x vocab, row j predicting target j).

    `fp32`: float32 log-softmax, the picked log-probabilities summed in float64. `logits_dtype`: the log-softmax
    in the logits' own dtype, the picked log-probabilities gathered and summed in that dtype (a bf16 sum for bf16
    logits).
    """
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    if numerics == "logits_dtype":
        log_probs = torch.log_softmax(logits, dim=-1)
        return float(log_probs.gather(1, targets.unsqueeze(-1)).squeeze(-1).sum().item())
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, targets[:, None]).double().sum().item()


def batch_logits(model, seqs: Sequence[Sequence[int]], pad: int, first: int, device) -> torch.Tensor:
    """The logits of a batch of token sequences from position `first` on, right padded with `pad` to the longest
    under an attention mask (padding follows every real token, so causal attention keeps it out)."""
    width = max(len(seq) for seq in seqs)
    input_ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, seq in enumerate(seqs):
        input_ids[r, : len(seq)], mask[r, : len(seq)] = torch.tensor(list(seq)), 1
    return model(input_ids=input_ids.to(device), attention_mask=mask.to(device), logits_to_keep=width - first).logits


def largest_loglik_batch(model, rows: int, context_length: int, continuation_length: int) -> None:
    """The largest batch `continuation_logliks` runs, on token ids of zeros (the meta device for the memory
    estimate): `rows` requests of a context and a continuation of these lengths, their logits from the
    continuation on, and one request's float32 log-softmax (`continuation_loglik` under `fp32`, one request's at
    a time)."""
    seqs = [[0] * (context_length + continuation_length)] * rows
    logits = batch_logits(model, seqs, 0, context_length - 1, input_device(model))
    torch.log_softmax(logits[0, :continuation_length].float(), dim=-1)


def continuation_logliks(
    model,
    tokenizer,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    batch_size: int = TINYBENCH_BATCH_SIZE,
    numerics: str = "fp32",
) -> list[float]:
    """log p(continuation | context) of each (context ids, continuation ids) request.

    Each request's logits at its continuation tokens make its `continuation_loglik` under `numerics`. Requests
    run longest first, `batch_size` at a time, right padded with an attention mask (padding follows every real
    token, so causal attention keeps it out); only the logits from the batch's earliest continuation on are
    computed. The model is in eval mode meanwhile.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
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
            # the logits at position p predict token p + 1: keep positions from the earliest context end
            first = min(len(rows[i][0]) for i in batch) - 1
            logits = batch_logits(model, [rows[i][0] + rows[i][1] for i in batch], pad, first, device)
            for r, i in enumerate(batch):
                n_context, n_cont = len(rows[i][0]), len(rows[i][1])
                start = n_context - 1 - first
                targets = torch.tensor(rows[i][1], device=logits.device)
                out[i] = continuation_loglik(logits[r, start : start + n_cont], targets, numerics)
    return out
