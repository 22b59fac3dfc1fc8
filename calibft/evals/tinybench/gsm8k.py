"""GSM8K answer extraction and exact match (docs/tinybench.md, GSM8K): the strict and flexible answers of a
generation and the reference they are compared with, under either protocol of the switch `gsm8k_extraction`
(`GSM8K_EXTRACTIONS`): the authors' release (`gsm8k_release_*`, numbers compared through `Decimal`) or
lm-evaluation-harness's tinyGSM8k task (`gsm8k_strict`, `gsm8k_flexible`, `normalize_gsm8k`). `gsm8k_answers`
gives the fields of one generation's item record, from the text `gsm8k_text` cleans of reasoning under the
switch `answer_reasoning`."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation

from calibft.core.checks import check_choice
from calibft.core.protocol import SWITCH
from calibft.lm.chat import strip_model_response, strip_reasoning

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


def gsm8k_text(generation: str, reasoning: str, strips_thinking: bool) -> str:
    """The text GSM8K answers are extracted from: a generation as `calibft.evals.tinybench.generate.cut_generation`
    decodes it under `reasoning` (a value of protocol switch `answer_reasoning`), cleaned of reasoning.

    - `strip_reasoning`: `calibft.lm.chat.strip_reasoning`, for every model;
    - `release`: the release's `strip_model_response` (retention/tinybenchmarks_tasks.py, line 264): `<think>`
      blocks removed only for a model with `strips_thinking` (its Qwen3 family), the text trimmed for any other.
    """
    check_choice("answer_reasoning", reasoning, SWITCH["answer_reasoning"].values)
    if reasoning == "strip_reasoning":
        return strip_reasoning(generation)
    return strip_model_response(generation, strips_thinking)


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
