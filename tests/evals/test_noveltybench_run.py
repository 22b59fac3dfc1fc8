import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from calibft.core.io import read_jsonl
from calibft.core.protocol import resolve
from calibft.demo.tiny_evaluators import TinyEvaluatorSettings, build_tiny_evaluator
from calibft.demo.tiny_model import OPEN_ENDED_FAVOURITES
from calibft.evals.noveltybench import runner as noveltybench_run
from calibft.evals.noveltybench.job import GenerationJob, ScoringJob
from calibft.evals.noveltybench.metrics import distinct, equivalent, ratings, split_summary, utility
from calibft.evals.noveltybench.runner import (
    generate,
    load_prompts,
    main,
    reward_scores,
    score,
    similarity_classifier,
    similarity_probability,
)
from calibft.lm import generation
from calibft.lm.models import load_classifier
from calibft.pipeline.jobs import generation_job
from calibft.pipeline.layout import Layout
from tests.test_jobs import load

REPO = Path(__file__).resolve().parents[2]

PROMPTS = [
    {"id": "curated-0", "category": "Creativity", "prompt": "Tell me a two-sentence story about a fox."},
    {"id": "curated-1", "category": "Factual Knowledge", "prompt": "Name a city in Africa."},
    {"id": "curated-2", "prompt": "Pick a random fruit."},
]


def _write_prompts(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_load_prompts_reads_the_benchmark_format(tmp_path):
    rows = load_prompts(_write_prompts(tmp_path / "p.jsonl", [*PROMPTS, {"prompt": "No id here."}]), "curated")
    assert [r["id"] for r in rows] == ["curated-0", "curated-1", "curated-2", "curated-3"]
    assert rows[1] == {"id": "curated-1", "split": "curated", "category": "Factual Knowledge", **PROMPTS[1]}
    assert rows[2]["category"] is None


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'], "duplicate prompt ids"),
        (['{"id": "a", "prompt": "  "}'], "line 1: expected an object"),
        (['{"id": "a", "prompt": "x"}', "[1, 2]"], "line 2: expected an object"),
        (["{not json"], "line 1: not JSON"),
        ([""], "no prompts"),
    ],
)
def test_load_prompts_rejects_malformed_files(tmp_path, lines, message):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        load_prompts(path, "curated")


@pytest.fixture(scope="session")
def evaluators(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("evaluators")
    return {
        kind: build_tiny_evaluator(root / kind, TinyEvaluatorSettings(kind=kind, seed=2))
        for kind in ("similarity_classifier", "reward_model")
    }


def test_tiny_evaluators_load_through_from_pretrained_and_spread_their_scores(evaluators):
    folder = evaluators["similarity_classifier"]
    classifier = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(classifier).__name__ == "DebertaV2ForSequenceClassification" and classifier.config.num_labels == 2
    texts = ["Paris, the capital of France, is lovely in spring", "Tokyo is huge, busy and full of good food",
             "A fox who loved to read books by the river", "Blue is the colour of the sky and the sea"]  # fmt: skip
    probs = [similarity_probability(classifier, tokenizer, a, b) for a in texts for b in texts if a != b]
    assert min(probs) < 0.102 < max(probs)  # both sides of the metric's threshold occur
    # the head is centered on pairs of favourite answers: the threshold splits them in half
    items = list(OPEN_ENDED_FAVOURITES.values())[:8]
    probs = [similarity_probability(classifier, tokenizer, a, b) for a in items for b in items if a != b]
    assert sorted(probs)[len(probs) // 2 - 1] == pytest.approx(0.102, abs=1e-5)  # the lower median

    folder = evaluators["reward_model"]
    reward = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(reward).__name__ == "Gemma2ForSequenceClassification" and reward.config.num_labels == 1
    requests = ["Say something.", "Pick a random fruit.", "Name a city in South America."]
    chats = [[{"role": "user", "content": u}, {"role": "assistant", "content": t}] for t in texts for u in requests]
    assert len(set(ratings(reward_scores(reward, tokenizer, chats, 4)).tolist())) >= 3  # ratings, not all 10s


def test_tiny_evaluators_are_reproducible_from_their_seed(evaluators, tmp_path):
    again = build_tiny_evaluator(tmp_path / "again", TinyEvaluatorSettings(kind="reward_model", seed=2))
    other = build_tiny_evaluator(tmp_path / "other", TinyEvaluatorSettings(kind="reward_model", seed=3))
    weights = (evaluators["reward_model"] / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights
    with pytest.raises(ValueError, match="kind must be one of"):
        TinyEvaluatorSettings(kind="judge")
    with pytest.raises(ValueError, match="unknown tiny-evaluator setting"):
        TinyEvaluatorSettings.from_dict({"kind": "reward_model", "layers": 3})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    root = tmp_path_factory.mktemp("noveltybench")
    _write_prompts(root / "curated.jsonl", PROMPTS)
    return root


def _generation_job(root: Path, out: str, **changes) -> GenerationJob:
    job = GenerationJob(
        model="", model_key="tiny", tokenizer="", chat={"template_kwargs": {"enable_thinking": False}},
        condition="base", seed=7, precision="fp32", out_dir=str(root / out), split="curated",
        prompts_file=str(root / "curated.jsonl"),
        sampling={"samples_per_prompt": 10, "max_new_tokens": 10, "batch_size": 10},
    )  # fmt: skip
    return replace(job, **changes)


@pytest.fixture(scope="module")
def generated(workdir, briefly_trained_model) -> Path:
    model = str(briefly_trained_model)
    generate(_generation_job(workdir, "base", model=model, tokenizer=model))
    return workdir / "base" / "generations.jsonl.gz"


def test_generations_hold_ten_answers_per_prompt(generated):
    records = read_jsonl(generated)
    assert [r["id"] for r in records] == ["curated-0", "curated-1", "curated-2"]
    for record, prompt in zip(records, PROMPTS, strict=True):
        assert record["prompt"] == prompt["prompt"] and record["split"] == "curated"
        assert len(record["generations"]) == len(record["finished"]) == 10


def test_max_prompts_keeps_the_files_first_prompts_with_their_generations(workdir, generated, briefly_trained_model):
    model = str(briefly_trained_model)
    generate(_generation_job(workdir, "first_two", model=model, tokenizer=model, max_prompts=2))
    assert read_jsonl(workdir / "first_two" / "generations.jsonl.gz") == read_jsonl(generated)[:2]
    with pytest.raises(ValueError, match="max_prompts must be >= 1"):
        _generation_job(workdir, "none", max_prompts=0)


def test_a_preempted_generation_resumes_to_the_same_bytes(workdir, generated, briefly_trained_model, monkeypatch):
    model = str(briefly_trained_model)
    job = _generation_job(workdir, "resumed", model=model, tokenizer=model, checkpoint_dir=str(workdir / "ckpt"))
    real, calls = noveltybench_run.sample_texts, []

    def preempted_after_two_prompts(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("preempted")
        return real(*args, **kwargs)

    monkeypatch.setattr(noveltybench_run, "sample_texts", preempted_after_two_prompts)
    with pytest.raises(KeyboardInterrupt):
        generate(job)
    assert sorted(p.name for p in (workdir / "ckpt").glob("*.jsonl.gz")) == ["curated-0.jsonl.gz", "curated-1.jsonl.gz"]
    calls.clear()
    generate(job)
    assert len(calls) == 1
    assert (workdir / "resumed" / "generations.jsonl.gz").read_bytes() == generated.read_bytes()
    assert not (workdir / "ckpt").exists()


@pytest.fixture(scope="module")
def scored(workdir, generated, evaluators) -> tuple[ScoringJob, Path]:
    job = ScoringJob(
        model_key="tiny", condition="base", split="curated", generations=str(generated),
        classifier=str(evaluators["similarity_classifier"]),
        classifier_tokenizer=str(evaluators["similarity_classifier"]),
        reward_model=str(evaluators["reward_model"]), precision="fp32", out_dir=str(workdir / "scores"),
        reward_batch_size=3,
    )  # fmt: skip
    main(["score", json.dumps(job.__dict__)])
    return job, workdir / "scores"


def test_scores_recompute_from_the_generations_and_the_evaluators(scored, evaluators):
    job, out = scored
    rows = read_jsonl(out / "scores.jsonl")
    classifier = AutoModelForSequenceClassification.from_pretrained(job.classifier).eval()
    classify = similarity_classifier(classifier, AutoTokenizer.from_pretrained(job.classifier_tokenizer))
    reward = AutoModelForSequenceClassification.from_pretrained(job.reward_model).eval()
    reward_tokenizer = AutoTokenizer.from_pretrained(job.reward_model)
    for row in rows:
        chats = [
            [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": t}]
            for t in row["generations"]
        ]
        bos = job.protocol["noveltybench_reward_bos"]
        np.testing.assert_allclose(row["rewards"], reward_scores(reward, reward_tokenizer, chats, 1, bos), atol=1e-5)
        assert row["ratings"] == ratings(row["rewards"]).tolist()
        assert row["utility"] == pytest.approx(utility(row["class_ids"], row["ratings"]))
        assert row["distinct"] == distinct(row["class_ids"])
        for i, c in enumerate(row["class_ids"]):  # each generation joined the first class it matches
            first = row["class_ids"].index(c)
            if first != i:
                assert equivalent(row["generations"][first], row["generations"][i], classify)
    assert read_jsonl(out / "partitions.jsonl") == [{"id": r["id"], "class_ids": r["class_ids"]} for r in rows]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"] == "noveltybench" and summary["split"] == "curated" and summary["n_prompts"] == 3
    assert summary["utility"] == pytest.approx(np.mean([r["utility"] for r in rows]))
    assert summary["distinct"] == pytest.approx(np.mean([r["distinct"] for r in rows]))
    for key in ("utility", "distinct"):  # over resamples of the split's prompts
        low, high = summary["intervals"][key]
        assert low <= summary[key] <= high
    assert summary["intervals"] == split_summary(rows, "curated")["intervals"]


def test_scoring_is_deterministic(scored):
    job, out = scored
    score(replace(job, out_dir=str(out.parent / "scores_again"), checkpoint_dir=str(out.parent / "score_ckpt")))
    assert (out.parent / "scores_again" / "scores.jsonl").read_bytes() == (out / "scores.jsonl").read_bytes()


def test_the_similarity_classifier_is_loaded_in_fp32_whatever_the_precision(scored, monkeypatch):
    """Upstream loads the classifier in fp32 and thresholds its probability at 0.102; bf16 would move decisions."""
    job, out = scored
    loaded = []

    def recording(name_or_path, precision):
        loaded.append((name_or_path, precision))
        return load_classifier(name_or_path, precision)

    monkeypatch.setattr(noveltybench_run, "load_classifier", recording)
    score(replace(job, precision="bf16", out_dir=str(out.parent / "scores_bf16")))
    assert loaded == [(job.classifier, "fp32"), (job.reward_model, "bf16")]


def test_the_reward_model_reads_the_jobs_bos_switch(scored, monkeypatch):
    job, out = scored
    assert job.protocol["noveltybench_reward_bos"] == "doubled"  # the release's protocol, the job's default
    seen = []

    def recording(model, tokenizer, chats, batch_size, bos):
        seen.append(bos)
        return reward_scores(model, tokenizer, chats, batch_size, bos)

    monkeypatch.setattr(noveltybench_run, "reward_scores", recording)
    for bos in ("single", "doubled"):
        protocol = resolve({"switches": {"noveltybench_reward_bos": bos}})
        score(replace(job, protocol=protocol, out_dir=str(out.parent / f"scores_{bos}")))
    assert seen == ["single"] * 3 + ["doubled"] * 3  # one call per prompt


def _published_generation_config(model_key: str) -> dict:
    """The generation_config.json the paper's checkpoint publishes (reference/checkpoints/, hub-hash checked)."""
    return json.loads((REPO / "reference" / "checkpoints" / model_key / "generation_config.json").read_text())


def _paper_generation_job(tmp_path: Path, model_key: str, **protocol) -> GenerationJob:
    """The paper config's NoveltyBench job of a fine-tuned model under `protocol`, its model a folder holding
    only the checkpoint's published generation config (all that the sampling settings read)."""
    folder = tmp_path / model_key
    folder.mkdir(exist_ok=True)
    (folder / "generation_config.json").write_text(json.dumps(_published_generation_config(model_key)))
    layout = Layout(load("config.yaml", **protocol), "/repo")
    return replace(generation_job(layout, model_key, "soft", "curated"), model=str(folder))


# (temperature, top_p) in force: the vLLM path's explicit 1 and 1; the HF path's checkpoint values under
# transformers 4.57.6 (Qwen3 0.6 and 0.95, Gemma-3 top_p 0.95; Llama-3.2's config predates the fallback).
SAMPLING = {
    ("qwen3_0p6b", "hf_backend"): (0.6, 0.95),
    ("qwen3_0p6b", "vllm_backend"): (1.0, 1.0),
    ("gemma3_1b_it", "hf_backend"): (1.0, 0.95),
    ("gemma3_1b_it", "vllm_backend"): (1.0, 1.0),
    ("llama3_2_1b_it", "hf_backend"): (1.0, 1.0),
    ("llama3_2_1b_it", "vllm_backend"): (1.0, 1.0),
    ("gpt_oss_20b", "hf_backend"): (1.0, 1.0),
    ("gpt_oss_20b", "vllm_backend"): (1.0, 1.0),
}


@pytest.mark.parametrize(("model_key", "value"), sorted(SAMPLING))
def test_the_generation_job_samples_as_the_noveltybench_sampling_switch_says(tmp_path, model_key, value):
    job = _paper_generation_job(tmp_path, model_key, preset="release", switches={"noveltybench_sampling": value})
    settings = job.settings()
    assert (settings.temperature, settings.top_p) == SAMPLING[model_key, value]
    assert job.generation()["fallback_applied"] == (value == "hf_backend" and model_key != "llama3_2_1b_it")
    assert job.adapter.endswith(f"/adapters/{model_key}/soft")  # the condition's adapter on both paths


def test_the_presets_sample_noveltybench_on_the_hf_path_and_at_temperature_1():
    release, as_written = resolve({"preset": "release"}), resolve({"preset": "as_written"})
    assert release["noveltybench_sampling"] == "hf_backend" and as_written["noveltybench_sampling"] == "vllm_backend"


def test_vllm_backend_ignores_generation_defaults_and_hf_backend_follows_it(tmp_path):
    switches = {"noveltybench_sampling": "vllm_backend", "generation_defaults": "checkpoint"}
    job = _paper_generation_job(tmp_path, "qwen3_0p6b", preset="as_written", switches=switches)
    assert (job.settings().temperature, job.settings().top_p) == (1.0, 1.0)
    switches = {"noveltybench_sampling": "hf_backend", "generation_defaults": "exact"}
    job = _paper_generation_job(tmp_path, "qwen3_0p6b", preset="release", switches=switches)
    assert (job.settings().temperature, job.settings().top_p) == (1.0, 1.0)
    assert _paper_generation_job(tmp_path, "qwen3_0p6b", preset="release").settings().temperature == 0.6


@pytest.mark.parametrize(("value", "expected"), [("hf_backend", (0.6, 0.95)), ("vllm_backend", (1.0, 1.0))])
def test_generate_samples_at_the_switchs_settings(tmp_path, briefly_trained_model, monkeypatch, value, expected):
    """The tiny model with Qwen3's sampling fields in its generation config (its own token ids kept): `generate`
    hands the sampler the settings the switch puts in force, and records them in provenance.json."""
    folder = tmp_path / "tiny_as_qwen3"
    shutil.copytree(briefly_trained_model, folder)
    own = json.loads((folder / "generation_config.json").read_text())
    sampling = {k: v for k, v in _published_generation_config("qwen3_0p6b").items() if "token" not in k}
    (folder / "generation_config.json").write_text(json.dumps(own | sampling))
    _write_prompts(tmp_path / "curated.jsonl", PROMPTS[:1])
    seen = []

    def recording(model, tokenizer, ids, settings, seed, reasoning):
        seen.append((settings.temperature, settings.top_p))
        return ["an answer"] * settings.num_samples, np.ones(settings.num_samples, dtype=bool)

    monkeypatch.setattr(noveltybench_run, "sample_texts", recording)
    protocol = resolve({"switches": {"noveltybench_sampling": value}})
    job = _generation_job(tmp_path, value, model=str(folder), tokenizer=str(folder), protocol=protocol)
    generate(job)
    assert seen == [expected]
    provenance = json.loads((tmp_path / value / "provenance.json").read_text())
    assert (provenance["generation"]["temperature"], provenance["generation"]["top_p"]) == expected


def test_main_names_its_commands(capsys):
    with pytest.raises(SystemExit, match=r"\{generate\|score\}"):
        main(["judge", "{}"])


WRITTEN = ["<think>x</think>Rome", "Rome</think>Milan"]


@pytest.mark.parametrize(
    ("reasoning", "strips_thinking", "stored"),
    [
        # the release hands on the decoded text, trimmed; its Qwen3 family's <think> blocks removed
        ("release", False, WRITTEN),
        ("release", True, ["Rome", "Rome</think>Milan"]),
        # calibft.lm.chat.strip_reasoning, whatever the model: what precedes a stray close tag removed too
        ("strip_reasoning", False, ["Rome", "Milan"]),
        ("strip_reasoning", True, ["Rome", "Milan"]),
    ],
)
def test_generations_lose_their_reasoning_by_the_switch_and_the_model(
    workdir, briefly_trained_model, monkeypatch, reasoning, strips_thinking, stored
):
    model = str(briefly_trained_model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in WRITTEN]

    def sample(model, prompt_ids, settings, stops, seed, progress=False):
        n = settings.num_samples
        return generation.Generations([ids[i % len(ids)] for i in range(n)], np.ones(n, dtype=bool))

    monkeypatch.setattr(generation, "sample", sample)
    out = f"reasoning_{reasoning}_{strips_thinking}"
    protocol = resolve({"switches": {"answer_reasoning": reasoning}})
    job = _generation_job(workdir, out, model=model, tokenizer=model, protocol=protocol, max_prompts=1)
    generate(replace(job, release_strips_thinking=strips_thinking, sampling={**job.sampling, "samples_per_prompt": 2}))
    (record,) = read_jsonl(workdir / out / "generations.jsonl.gz")
    assert record["generations"] == stored
