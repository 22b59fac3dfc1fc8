import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import calibft.evals.open_ended.runner as open_ended
from calibft.core.io import read_jsonl
from calibft.core.protocol import resolve
from calibft.evals.open_ended.job import OPEN_ENDED_THRESHOLDS, OpenEndedJob
from calibft.evals.open_ended.metrics import (
    NORMALIZATIONS,
    first_token_support,
    normalize,
    resampled_distinct,
    sample_records,
    score,
    unique_fraction,
)
from calibft.evals.open_ended.runner import first_token_probs, load_prompts, run, sample_answers
from calibft.lm.chat import ChatOptions, chat_prompt_ids, strip_reasoning
from calibft.lm.models import load_model, load_tokenizer

CHAT = {"template_kwargs": {"enable_thinking": False}}
PROMPTS = [
    "Name a random city. Output ONLY the answer.",
    "Pick a random color. Output ONLY the answer.",
    "Think of a random planet. Output ONLY the answer.",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris", "Paris"),
        ("<think>\nmaybe Rome\n</think>\n\nParis", "Paris"),
        ("Paris<think>unfinished", "Paris"),
        ("\n\n   \nParis\nRome", "Paris"),
        ("  New \t  York   City ", "New York City"),
        ('"Paris"', "Paris"),
        ("'Paris'", "Paris"),
        ("`Paris`", "`Paris`"),  # straight quotes only, as the authors' normalization
        ("\u201cParis\u201d", "\u201cParis\u201d"),
        ('" Paris "', "Paris"),
        ("\"Paris'", "\"Paris'"),  # not a matching pair
        ('"Paris', '"Paris'),
        ('""Paris""', '"Paris"'),  # one pair only
        ("'New York' City", "'New York' City"),  # not surrounding the whole answer
        ("PARIS", "PARIS"),  # case kept
        ('"', '"'),
        ('""', ""),
        ("", ""),
        ("<think>only reasoning</think>", ""),
        ("<think>\n\n</think>\n\n Oslo\n", "Oslo"),  # Qwen3 with reasoning off: the template's empty block
    ],
)
@pytest.mark.parametrize("rule", NORMALIZATIONS)
def test_normalize(text, expected, rule):
    """Ordinary answers normalize alike under both values of `open_ended_normalization`."""
    assert normalize(text, rule) == expected


# (text, under `release`, under `strip_reasoning`): where the two rules part
PARTING = [
    ("Rome</think>Milan", "RomeMilan", "Milan"),  # a close tag without its opening: deleted / what follows kept
    ("<THINK>maybe Rome</THINK>Paris", "Paris", "<THINK>maybe Rome</THINK>Paris"),  # the release ignores case
    ("analysisThe user wants one city.assistantfinalLisbon", "analysisThe user wants one city.assistantfinalLisbon",
     "Lisbon"),  # GPT-OSS decoded with special tokens skipped: only strip_reasoning knows its channels
]  # fmt: skip


@pytest.mark.parametrize(("text", "release", "stripped"), PARTING)
def test_normalize_parts_on_reasoning_tags(text, release, stripped):
    assert normalize(text, "release") == release and normalize(text) == release  # release: the default
    assert normalize(text, "strip_reasoning") == stripped


def test_normalize_names_its_rules():
    with pytest.raises(ValueError, match="rule must be one of"):
        normalize("Paris", "lenient")


def test_unique_fraction_by_hand():
    texts = ["Paris", '"Paris"', "paris", " Paris \nRome", "Rome", "", '""', "<think>x</think>", "Lyon", "Lyon"]
    # distinct non-empty: Paris, paris, Rome, Lyon -> 4 of 10 samples (empty answers count as samples, not answers)
    for rule in NORMALIZATIONS:
        assert unique_fraction(texts, rule) == pytest.approx(0.4)
    assert unique_fraction(["a", "b"]) == 1.0
    assert unique_fraction([""]) == 0.0
    assert unique_fraction([]) is None
    # "Rome</think>Milan" is RomeMilan (a third answer) for the release, Milan (the second again) for strip_reasoning
    texts = ["Rome", "Milan", "Rome</think>Milan", "<THINK>x</THINK>Rome"]
    assert unique_fraction(texts, "release") == pytest.approx(3 / 4)
    assert unique_fraction(texts, "strip_reasoning") == pytest.approx(3 / 4)  # Rome, Milan, <THINK>x</THINK>Rome
    assert unique_fraction(texts[:3], "strip_reasoning") == pytest.approx(2 / 3)


def _support_loop(probs: np.ndarray, threshold: float) -> int:
    """The definition, one token at a time (with the documented tolerance for sums of decimals)."""
    probs = np.sort(np.asarray(probs, dtype=np.float64))[::-1]
    total, mass = probs.sum(), 0.0
    for k, p in enumerate(probs, start=1):
        mass += p
        if mass / total >= threshold - 1e-9:
            return k
    return len(probs)


def test_support_on_crafted_distributions():
    assert first_token_support(np.array([0.2, 0.5, 0.3]), [0.5, 0.8, 0.81, 1.0, 0.01]).tolist() == [1, 2, 3, 3, 1]
    assert first_token_support(np.full(100, 0.01), [0.9, 0.99, 0.01]).tolist() == [90, 99, 1]
    assert first_token_support(np.array([1.0, 0.0, 0.0]), [0.99]).tolist() == [1]
    # ties: equal probabilities in any order give the same k
    assert first_token_support(np.array([0.1, 0.4, 0.4, 0.1]), [0.8, 0.85]).tolist() == [2, 3]
    # just below a boundary is not enough, well beyond the rounding of sums
    assert first_token_support(np.array([0.5, 0.3 - 1e-6, 0.2 + 1e-6]), [0.8]).tolist() == [3]
    # not normalized: coverage is relative to the total
    assert first_token_support(np.array([5.0, 3.0, 2.0]), [0.8]).tolist() == [2]


def test_support_matches_a_plain_loop(rng):
    thresholds = np.array(OPEN_ENDED_THRESHOLDS)
    assert len(thresholds) == 99 and thresholds[0] == 0.01 and thresholds[-1] == 0.99 and 0.9 in thresholds
    rows = [rng.dirichlet(np.full(50, alpha)) for alpha in (0.05, 0.5, 5.0)]
    rows.append(np.round(rng.dirichlet(np.ones(20)), 2))  # decimal probabilities: many exact boundaries
    rows.append(np.full(100, 0.01))
    for row in rows:
        expected = [_support_loop(row, t) for t in thresholds]
        assert first_token_support(row, thresholds).tolist() == expected
    batch = np.stack(rows[:3]).reshape(3, 1, 50)
    assert first_token_support(batch, thresholds).shape == (3, 1, 99)
    assert first_token_support(batch, thresholds)[:, 0].tolist() == [first_token_support(r).tolist() for r in rows[:3]]


def test_support_rejects_bad_input():
    with pytest.raises(ValueError):
        first_token_support(np.array([0.5, -0.1, 0.6]))
    with pytest.raises(ValueError):
        first_token_support(np.array([0.5, 0.5]), [0.0])


def test_load_prompts_reads_the_authors_format(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS, indent=2))
    assert load_prompts(path) == PROMPTS
    for bad, message in [({"a": 1}, "array"), ([], "array"), (["ok", ""], "prompt 1"), (["ok", 3], "prompt 1")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            load_prompts(path)
    path.write_text("[not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_prompts(path)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    root = tmp_path_factory.mktemp("open_ended")
    (root / "tiny").symlink_to(briefly_trained_model)
    (root / "prompts.json").write_text(json.dumps(PROMPTS, indent=2) + "\n")
    return root


def _job(root: Path, out: str, **changes) -> OpenEndedJob:
    job = OpenEndedJob(
        model=str(root / "tiny"), model_key="tiny", tokenizer=str(root / "tiny"), chat=CHAT, condition="base",
        prompts_file=str(root / "prompts.json"), seed=5, precision="fp32", out_dir=str(root / out),
        sampling={"samples_per_prompt": 12, "max_new_tokens": 6, "batch_size": 8},
    )  # fmt: skip
    return replace(job, **changes)


def _scored(answers_by_prompt, supports, normalization="release", **bootstrap):
    """`score` of hand-made samples: per prompt its answers (as texts) and its support at every threshold."""
    prompts = [f"Name a random thing {i}. Output ONLY the answer." for i in range(len(answers_by_prompt))]
    records = [
        record
        for i, (prompt, texts) in enumerate(zip(prompts, answers_by_prompt, strict=True))
        for record in sample_records(i, prompt, texts, np.ones(len(texts), dtype=bool), normalization)
    ]
    rows = [{"prompt_index": i, "support": [s, s]} for i, s in enumerate(supports)]
    return score(prompts, records, rows, [0.5, 0.9], 0.9, normalization=normalization, **bootstrap)


def test_score_and_records_normalize_by_the_rule():
    texts = ["Rome</think>Milan", "Milan", "<THINK>a</THINK>Milan", "analysis x assistantfinalMilan"]
    release = _scored([texts], [1], "release", replicates=20, bootstrap_seed=1)
    stripped = _scored([texts], [1], "strip_reasoning", replicates=20, bootstrap_seed=1)
    # release: RomeMilan, Milan, Milan, "analysis x assistantfinalMilan"; strip_reasoning: Milan, Milan,
    # "<THINK>a</THINK>Milan", Milan
    assert release["prompts"][0]["unique_fraction"] == pytest.approx(3 / 4)
    assert stripped["prompts"][0]["unique_fraction"] == pytest.approx(2 / 4)
    assert release["intervals"]["unique_fraction"] != stripped["intervals"]["unique_fraction"]
    records = sample_records(0, "p", texts, np.ones(4, dtype=bool), "strip_reasoning")
    assert [r["normalized"] for r in records] == ["Milan", "Milan", "<THINK>a</THINK>Milan", "Milan"]
    assert [r["text"] for r in records] == texts  # the text as sampled, the normalization beside it


def test_resampled_distinct_counts_the_distinct_non_empty_answers_of_each_resample():
    answers = ["Paris", "", "Rome", "Paris", "Oslo", ""]
    draws = resampled_distinct(answers, np.random.default_rng(3), 40)
    picks = np.random.default_rng(3).integers(0, len(answers), size=(40, len(answers)))
    assert draws.tolist() == [len({answers[j] for j in row} - {""}) for row in picks]


def test_intervals_resample_samples_within_prompts_reproducibly():
    answers = [["a", "b", "a", "c", "", "d", "a", "b"], ["x"] * 5 + ["y"] * 3, ["p", "q", "r", "s", "t", "u"]]
    metrics = _scored(answers, [3, 10, 7], replicates=400, bootstrap_seed=11)
    intervals = metrics["intervals"]
    assert intervals == _scored(answers, [3, 10, 7], replicates=400, bootstrap_seed=11)["intervals"]
    assert intervals != _scored(answers, [3, 10, 7], replicates=400, bootstrap_seed=12)["intervals"]
    low, high = intervals["unique_fraction"]
    assert low < metrics["aggregate"]["unique_fraction"] < high
    # the support comes from one forward pass: no sampling spread, its interval is its value
    assert intervals["support"] == pytest.approx([20 / 3, 20 / 3])
    assert intervals["resampled"] == "samples within prompts" and intervals["replicates"] == 400


def test_intervals_by_hand():
    # one answer repeated: every resample has one distinct answer in 4 samples; an all-empty prompt has none
    intervals = _scored([["Paris"] * 4, [""] * 4], [2, 4], replicates=50, bootstrap_seed=0)["intervals"]
    assert intervals["unique_fraction"] == pytest.approx([0.125, 0.125])  # mean of 1/4 and 0/4
    assert "intervals" not in _scored([["Paris"] * 4], [2])  # no replicates, no intervals


@pytest.fixture(scope="module")
def evaluated(workdir) -> Path:
    run(_job(workdir, "base"))
    return workdir / "base"


def test_first_token_probs_is_the_softmax_of_a_full_forward(workdir):
    tokenizer, model = load_tokenizer(workdir / "tiny"), load_model(workdir / "tiny", "fp32", "cpu").eval()
    ids = chat_prompt_ids(tokenizer, PROMPTS[0], ChatOptions.from_config(CHAT))
    probs = first_token_probs(model, ids)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    assert probs.dtype == np.float64 and probs.shape == (model.config.vocab_size,)
    np.testing.assert_allclose(probs, torch.softmax(logits.double(), -1).numpy(), rtol=1e-5, atol=1e-9)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)


def test_outputs_hold_every_sample_and_support(evaluated):
    samples = read_jsonl(evaluated / "samples.jsonl.gz")
    assert len(samples) == 3 * 12
    assert set(samples[0]) == {"prompt_index", "prompt", "index", "text", "normalized", "finished"}
    assert [s["index"] for s in samples[:12]] == list(range(12))
    assert [s["prompt"] for s in samples[::12]] == PROMPTS
    assert all(s["normalized"] == normalize(s["text"]) for s in samples)
    supports = read_jsonl(evaluated / "support.jsonl")
    assert [row["prompt_index"] for row in supports] == [0, 1, 2]
    for row in supports:
        assert len(row["support"]) == 99 and row["support"][0] >= 1
        assert np.all(np.diff(row["support"]) >= 0)  # more mass never needs fewer tokens


def test_metrics_recompute_from_the_stored_files(evaluated):
    metrics = json.loads((evaluated / "metrics.json").read_text())
    samples = read_jsonl(evaluated / "samples.jsonl.gz")
    supports = read_jsonl(evaluated / "support.jsonl")
    assert metrics["thresholds"] == list(OPEN_ENDED_THRESHOLDS) and metrics["headline_threshold"] == 0.9
    column = metrics["thresholds"].index(0.9)
    for row, support in zip(metrics["prompts"], supports, strict=True):
        answers = [s["normalized"] for s in samples if s["prompt_index"] == row["prompt_index"]]
        assert row["unique_fraction"] == len({a for a in answers if a}) / 12
        assert row["support"] == support["support"][column]
    aggregate = metrics["aggregate"]
    assert aggregate["num_prompts"] == 3
    assert aggregate["support"] == pytest.approx(np.mean([r["support"] for r in metrics["prompts"]]))
    assert aggregate["unique_fraction"] == pytest.approx(np.mean([r["unique_fraction"] for r in metrics["prompts"]]))
    assert aggregate["support_by_threshold"] == pytest.approx(np.mean([s["support"] for s in supports], axis=0))
    recomputed = score(PROMPTS, samples, supports, metrics["thresholds"])
    assert {k: recomputed[k] for k in ("aggregate", "prompts")} == {k: metrics[k] for k in ("aggregate", "prompts")}
    # the intervals too, from the job's bootstrap seed (its seed, model and condition)
    seed = _job(evaluated.parent, "base").seed_of("bootstrap", "open_ended")
    again = score(PROMPTS, samples, supports, metrics["thresholds"], replicates=1000, bootstrap_seed=seed)
    assert metrics["intervals"] == again["intervals"] and metrics["intervals"]["seed"] == seed


def test_same_seed_same_bytes_other_seed_other_samples(workdir, evaluated):
    run(_job(workdir, "again"))
    assert (workdir / "again" / "samples.jsonl.gz").read_bytes() == (evaluated / "samples.jsonl.gz").read_bytes()
    assert (workdir / "again" / "support.jsonl").read_bytes() == (evaluated / "support.jsonl").read_bytes()
    run(_job(workdir, "other", seed=6, thresholds=[0.5, 0.9], sampling={"samples_per_prompt": 12, "max_new_tokens": 6}))
    with gzip.open(workdir / "other" / "samples.jsonl.gz", "rt") as f:
        other = [json.loads(line)["text"] for line in f]
    assert other != [s["text"] for s in read_jsonl(evaluated / "samples.jsonl.gz")]
    assert json.loads((workdir / "other" / "metrics.json").read_text())["thresholds"] == [0.5, 0.9]


def test_job_requires_the_headline_among_the_thresholds(tmp_path):
    with pytest.raises(ValueError, match="headline_threshold"):
        _job(tmp_path, "x", thresholds=[0.5, 0.8])


# the `numerics` switch


def _release_support(probs: torch.Tensor, thresholds) -> dict[float, int]:
    """The authors' open_random_gen/metrics.py `top_p_support_sizes`, as it is called on one softmax row."""
    sorted_probs, _ = torch.sort(probs, descending=True)
    cumulative = torch.cumsum(sorted_probs, dim=0)
    sizes = {}
    for threshold in thresholds:
        indices = torch.nonzero(cumulative >= float(threshold), as_tuple=False)
        sizes[float(threshold)] = int(sorted_probs.numel()) if indices.numel() == 0 else int(indices[0].item()) + 1
    return sizes


def test_support_in_the_logits_dtype_is_the_release_computation():
    generator = torch.Generator().manual_seed(3)
    rows = [torch.softmax((torch.randn(300, generator=generator) * s).to(torch.bfloat16), -1) for s in (0.5, 2, 6)]
    for probs in rows:
        assert probs.dtype == torch.bfloat16
        expected = list(_release_support(probs, OPEN_ENDED_THRESHOLDS).values())
        assert first_token_support(probs, OPEN_ENDED_THRESHOLDS, "logits_dtype").tolist() == expected
    batch = first_token_support(torch.stack(rows).reshape(3, 1, 300), OPEN_ENDED_THRESHOLDS, "logits_dtype")
    assert batch.shape == (3, 1, 99)
    assert batch[:, 0].tolist() == [
        first_token_support(r, OPEN_ENDED_THRESHOLDS, "logits_dtype").tolist() for r in rows
    ]


def test_support_in_bf16_compares_with_the_rounded_threshold():
    """bf16 holds 0.899 as 0.8984375, and the comparison with 0.9 happens in bf16, where 0.9 is 0.8984375 too:
    one token covers 0.9 there, two in float64. A coverage short of its threshold by less than a bf16 step never
    reaches it in float64."""
    probs = torch.tensor([0.899, 0.101])
    assert first_token_support(probs.to(torch.bfloat16), [0.9], "logits_dtype").tolist() == [1]
    assert first_token_support(probs.double().numpy(), [0.9], "fp32").tolist() == [2]
    assert first_token_support(probs, [0.9], "fp32").tolist() == [2]  # a tensor is taken as float64 there
    # no renormalization in the release's computation: a row whose mass never reaches t gives the vocabulary size
    assert first_token_support(torch.tensor([0.4, 0.4]), [0.9], "logits_dtype").tolist() == [2]
    assert first_token_support(torch.tensor([0.2, 0.2, 0.1]), [0.9], "logits_dtype").tolist() == [3]
    assert first_token_support(np.array([0.2, 0.2, 0.1]), [0.9], "fp32").tolist() == [3]
    assert first_token_support(np.array([0.4, 0.2, 0.1]), [0.5], "fp32").tolist() == [1]  # 0.4 of 0.7
    assert first_token_support(torch.tensor([0.4, 0.2, 0.1]), [0.5], "logits_dtype").tolist() == [2]
    with pytest.raises(ValueError, match="numerics"):
        first_token_support(probs, [0.9], "bf16")
    with pytest.raises(ValueError):
        first_token_support(torch.tensor([0.5, -0.1, 0.6]), [0.9], "logits_dtype")


def test_first_token_probs_in_the_logits_dtype(workdir):
    tokenizer = load_tokenizer(workdir / "tiny")
    model = load_model(workdir / "tiny", "fp32", "cpu").to(torch.bfloat16).eval()
    ids = chat_prompt_ids(tokenizer, PROMPTS[0], ChatOptions.from_config(CHAT))
    probs = first_token_probs(model, ids, "logits_dtype")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    assert logits.dtype == torch.bfloat16 and probs.dtype == torch.bfloat16
    assert torch.equal(probs, torch.softmax(logits, -1))
    fp32 = first_token_probs(model, ids, "fp32")
    assert fp32.dtype == np.float64
    assert np.abs(fp32 - probs.double().numpy()).max() > 0  # bf16 rounding of the softmax shows


def test_run_passes_the_numerics_switch(workdir, monkeypatch):
    seen = []
    real = open_ended.first_token_support
    monkeypatch.setattr(open_ended, "first_token_support", lambda p, t, n: seen.append(n) or real(p, t, n))
    sampling = {"samples_per_prompt": 2, "max_new_tokens": 2}
    for numerics in ("fp32", "logits_dtype"):
        seen.clear()
        protocol = resolve({"switches": {"numerics": numerics}})
        run(_job(workdir, f"numerics_{numerics}", protocol=protocol, sampling=sampling))
        assert seen == [numerics] * len(PROMPTS)


# the `open_ended_normalization` switch


class _Decoder:
    """A tokenizer whose ids decode to fixed texts: id i to TEXTS[i], as a model might write them."""

    TEXTS = ("  Rome</think>Milan ", "<THINK>x</THINK>Oslo", "Lima")

    def decode(self, ids, skip_special_tokens=False):
        assert skip_special_tokens  # as the release's backend and calibft.lm.chat.decode_output decode
        return "".join(self.TEXTS[i] for i in ids)


def test_sample_answers_keep_the_reasoning_for_the_release_and_strip_it_otherwise(monkeypatch):
    import calibft.lm.generation as generation

    drawn = generation.Generations(token_ids=[[0], [1], [2]], finished=np.array([True, True, False]))
    monkeypatch.setattr(generation, "sample", lambda model, ids, settings, stops, seed, progress=False: drawn)
    monkeypatch.setattr(generation, "stop_token_ids", lambda model, tokenizer: [9])
    texts, finished = sample_answers(None, _Decoder(), [5], None, 0, "release")
    assert texts == ["Rome</think>Milan", "<THINK>x</THINK>Oslo", "Lima"] and finished.tolist() == [True, True, False]
    texts, _ = sample_answers(None, _Decoder(), [5], None, 0, "strip_reasoning")
    assert texts == ["Milan", "<THINK>x</THINK>Oslo", "Lima"]
    with pytest.raises(ValueError, match="rule must be one of"):
        sample_answers(None, _Decoder(), [5], None, 0, "raw")


def test_run_stores_what_each_rule_reads_from_the_same_draws(workdir, evaluated):
    """Both rules draw the same tokens; the release's rule (the default) stores the text with its reasoning
    tags, `strip_reasoning` without them, as the evaluation stored it before the switch existed."""
    protocol = resolve({"switches": {"open_ended_normalization": "strip_reasoning"}})
    run(_job(workdir, "strip_reasoning", protocol=protocol))
    assert _job(workdir, "x").protocol["open_ended_normalization"] == "release"
    release = read_jsonl(evaluated / "samples.jsonl.gz")
    stripped = read_jsonl(workdir / "strip_reasoning" / "samples.jsonl.gz")
    assert [strip_reasoning(r["text"]) for r in release] == [s["text"] for s in stripped]
    assert any("<think>" in r["text"] for r in release)  # the briefly trained tiny model writes think tags
    assert all(s["normalized"] == normalize(s["text"], "strip_reasoning") for s in stripped)
    assert all(r["normalized"] == normalize(r["text"], "release") for r in release)
