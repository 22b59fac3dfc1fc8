import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from calibft.core.protocol import resolve
from calibft.data.families import family
from calibft.data.grid import Prompt, prompts, select
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import TrieSet, trie_set_for_spaces
from calibft.evals.structured.job import StructuredJob
from calibft.evals.structured.metrics import extract_answer, sample_records, score
from calibft.evals.structured.runner import run
from calibft.lm import generation
from calibft.lm.chat import ChatOptions, chat_prompt_ids
from calibft.lm.models import load_model, load_tokenizer
from calibft.training.objectives import fixed_paths

CHAT = {"template_kwargs": {"enable_thinking": False}}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    """A quickly trained tiny model and the 16384-bin tries of a few held-out prompts."""
    root = tmp_path_factory.mktemp("structured")
    (root / "tiny").symlink_to(briefly_trained_model)
    tokenizer = load_tokenizer(root / "tiny")
    chosen = [p for p in prompts("ood") if p.id in ("poisson-001", "weibull-001", "truncnorm-000", "bernoulli-001")]
    spaces = SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, 5, 16384))
    trie_set_for_spaces(tokenizer, spaces).save(root / "ood_tries.npz")
    return root


def _job(root: Path, out: str, **changes) -> StructuredJob:
    job = StructuredJob(
        evaluation="structured", model=str(root / "tiny"), model_key="tiny", tokenizer=str(root / "tiny"),
        chat=CHAT, condition="base", split="ood", seed=11, precision="fp32",
        sampling={"samples_per_prompt": 40, "max_new_tokens": 12, "batch_size": 16},
        out_dir=str(root / out), tries=str(root / "ood_tries.npz"), logit_kl_paths=3, logit_kl_batch_size=5,
    )  # fmt: skip
    return replace(job, **changes)


@pytest.fixture(scope="module")
def evaluated(workdir) -> Path:
    run(_job(workdir, "base"))
    return workdir / "base"


def _samples(folder: Path) -> list[dict]:
    with gzip.open(folder / "samples.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def test_outputs_hold_every_sample(evaluated):
    samples = _samples(evaluated)
    assert len(samples) == 4 * 40
    assert set(samples[0]) == {"id", "index", "text", "value", "valid", "finished"}
    assert [s["index"] for s in samples[:40]] == list(range(40))
    kl = [json.loads(line) for line in (evaluated / "logit_kl.jsonl").read_text().splitlines()]
    assert [len(row["path_kl"]) for row in kl] == [3] * 4


def test_metrics_recompute_from_the_samples_with_scipy_alone(evaluated):
    metrics = json.loads((evaluated / "metrics.json").read_text())
    samples = _samples(evaluated)
    by_family: dict[str, list[float]] = {}
    for row in metrics["prompts"]:
        prompt = select(prompts("ood"), [row["id"]])[0]
        mine = [s for s in samples if s["id"] == row["id"]]
        law = family(prompt.family).law(prompt.params)
        lower, upper = law.support()
        values = np.array([float(s["text"]) for s in mine if s["valid"]])
        assert np.all((values >= lower) & (values <= upper))
        assert row["valid"] == len(values) and row["valid_rate"] == len(values) / 40
        if len(values):
            n = len(values)
            w1 = stats.wasserstein_distance(values, law.ppf((np.arange(1, n + 1) - 0.5) / n))
            assert row["w1"] == pytest.approx(w1, rel=1e-9)
            assert row["w1_norm"] == pytest.approx(w1 / (law.ppf(0.95) - law.ppf(0.05)), rel=1e-9)
            by_family.setdefault(prompt.family, []).append(row["w1_norm"])
        else:
            assert row["w1_norm"] is None
            by_family.setdefault(prompt.family, [])
    expected = (
        None
        if any(not values for values in by_family.values())
        else float(np.median([np.mean(values) for values in by_family.values()]))
    )
    assert metrics["aggregate"]["w1_norm"] == (pytest.approx(expected) if expected is not None else None)
    assert metrics["aggregate"]["undefined_families"] == [f for f, values in by_family.items() if not values]


def test_samples_are_reproducible_from_the_seed(workdir, evaluated):
    run(_job(workdir, "again"))
    assert (workdir / "again" / "samples.jsonl.gz").read_bytes() == (evaluated / "samples.jsonl.gz").read_bytes()
    run(_job(workdir, "other", condition="other"))  # the condition is part of the seed
    assert [s["text"] for s in _samples(workdir / "other")] != [s["text"] for s in _samples(evaluated)]


def test_logit_kl_equals_a_by_hand_teacher_forced_computation(workdir, evaluated):
    tokenizer = load_tokenizer(workdir / "tiny")
    model = load_model(workdir / "tiny", "fp32", "cpu").eval()
    tries = TrieSet.load(workdir / "ood_tries.npz")
    chosen = select(prompts("ood"), list(tries.ids))
    rows = [json.loads(line) for line in (evaluated / "logit_kl.jsonl").read_text().splitlines()]
    paths = fixed_paths(tries, 3, 11, "fixed")  # the default protocol's seeds (release)
    for i in (0, 2):
        trie = tries.trie(i)
        prompt_ids = chat_prompt_ids(tokenizer, chosen[i].prompt, ChatOptions.from_config(CHAT))
        for k, value in enumerate(paths[i]):
            tokens = trie.value_tokens(int(value)).tolist()
            with torch.no_grad():
                logits = model(torch.tensor([prompt_ids + tokens])).logits[0]
            log_pi = torch.log_softmax(logits[len(prompt_ids) - 1 :], dim=-1).double().numpy()
            node, per_step = 0, []
            for t, token in enumerate(tokens):
                kids = np.arange(trie.child_start[node], trie.child_start[node] + trie.child_count[node])
                q = trie.node_mass[kids] / trie.node_mass[node]
                q = np.maximum(q, 1e-8) / np.maximum(q, 1e-8).sum()
                per_step.append(np.sum(q * (np.log(q) - log_pi[t, trie.node_token[kids]])))
                node = int(kids[trie.node_token[kids] == token][0])
            assert rows[i]["path_kl"][k] == pytest.approx(np.mean(per_step), rel=1e-4, abs=1e-5)
        assert rows[i]["logit_kl"] == pytest.approx(np.mean(rows[i]["path_kl"]))


def test_ssot_answers_come_from_the_answer_tags():
    pattern = "<answer>(.*?)</answer>"
    assert extract_answer("<random_string>x7</random_string><answer> 4 </answer>", pattern) == " 4 "
    assert extract_answer("<answer>1</answer> then <answer>2</answer>", pattern) == "1"
    assert extract_answer("no tags: 4", pattern) is None
    assert extract_answer("4", None) == "4"
    prompt = select(prompts("ood"), ["poisson-001"])[0]
    texts = ["<answer>3</answer>", "3", "<answer>2.5</answer>", "<answer>\n-1\n</answer>", "<answer>7"]
    records = sample_records(prompt, texts, np.ones(5, dtype=bool), pattern)
    assert [r["value"] for r in records] == [3.0, None, 2.5, -1.0, None]
    assert [r["valid"] for r in records] == [True, False, False, False, False]


@pytest.mark.parametrize("rule", ["undefined", "dropped"])
def test_score_leaves_families_without_valid_samples_undefined(rule):
    """A family without any valid answer is undefined under both values of `w1_nonfinite_prompts`; a family where
    one prompt has none is undefined under `undefined` (the release's infinite W1) and the mean of the others
    under `dropped`."""
    chosen = select(prompts("ood"), ["poisson-000", "poisson-001", "chi-000"])
    records = [{"id": "poisson-000", "value": float(v), "valid": True} for v in (0, 1, 1, 2)]
    records += [{"id": "poisson-001", "value": None, "valid": False}] * 4
    records += [{"id": "chi-000", "value": None, "valid": False}] * 4
    kl = {"poisson-000": 0.5, "poisson-001": 1.5, "chi-000": 2.0}
    metrics = score(chosen, records, kl, replicates=20, w1_nonfinite_prompts=rule)
    assert metrics["aggregate"]["w1_norm"] is None and metrics["intervals"]["w1_norm"] is None
    assert metrics["aggregate"]["logit_kl"] == pytest.approx(np.median([1.0, 2.0]))
    assert metrics["aggregate"]["valid_rate"] == pytest.approx(np.mean([0.5, 0.0]))
    poisson = metrics["families"][0]
    assert poisson["family"] == "poisson" and poisson["num_prompts"] == 2
    if rule == "dropped":
        assert metrics["aggregate"]["undefined_families"] == ["chi"]
        assert poisson["w1_norm"] == metrics["prompts"][0]["w1_norm"]  # the prompt without valid samples left out
    else:
        assert metrics["aggregate"]["undefined_families"] == ["poisson", "chi"] and poisson["w1_norm"] is None


def test_one_prompt_without_valid_samples_moves_the_aggregate_by_the_switch():
    """Family A = [0.2, none], B, C: the median of A's mean and the others' under `dropped`, undefined under
    `undefined` (the release's infinite family mean), in the aggregate and in every bootstrap replicate."""
    ids = ["poisson-000", "poisson-001", "chi-000", "weibull-000"]
    chosen = select(prompts("ood"), ids)
    records = [{"id": i, "value": v, "valid": True} for i in ids[::2] + ids[3:] for v in (0.5, 1.0, 2.0, 3.0)]
    records += [{"id": "poisson-001", "value": None, "valid": False}] * 4
    dropped = score(chosen, records, replicates=20, w1_nonfinite_prompts="dropped")
    undefined = score(chosen, records, replicates=20, w1_nonfinite_prompts="undefined")
    assert dropped["aggregate"]["w1_norm"] is not None and dropped["intervals"]["w1_norm"] is not None
    assert undefined["aggregate"]["w1_norm"] is None and undefined["intervals"]["w1_norm"] is None
    assert undefined["aggregate"]["undefined_families"] == ["poisson"]
    with pytest.raises(ValueError, match="w1_nonfinite_prompts must be one of undefined, dropped"):
        score(chosen, records, w1_nonfinite_prompts="infinite")


def test_a_law_without_spread_between_its_5_and_95_percent_quantiles_has_no_normalized_w1():
    """Bernoulli(0.01): Q95 - Q05 = 0, so W1 is defined (the quantiles at 1/6, 1/2, 5/6 are all 0: W1 = 1/3) and
    its normalized value is not (no division by 0)."""
    skewed = Prompt("bernoulli-x", "bernoulli", {"p": 0.01}, "")
    metrics = score([skewed], [{"id": "bernoulli-x", "value": v, "valid": True} for v in (0.0, 0.0, 1.0)])
    row = metrics["prompts"][0]
    assert row["w1_scale"] == 0 and row["w1"] == pytest.approx(1 / 3) and row["w1_norm"] is None
    assert metrics["aggregate"]["w1_norm"] is None and metrics["aggregate"]["undefined_families"] == ["bernoulli"]


def test_ssot_run_scores_tagged_answers_without_logit_kl(workdir):
    job = _job(
        workdir, "ssot", evaluation="ssot", tries=None, system="Answer inside <answer></answer>.",
        answer_pattern="<answer>(.*?)</answer>", sampling={"samples_per_prompt": 3, "max_new_tokens": 6},
    )  # fmt: skip
    run(job)
    metrics = json.loads((workdir / "ssot" / "metrics.json").read_text())
    assert metrics["evaluation"] == "ssot" and metrics["aggregate"]["logit_kl"] is None
    assert [row["id"] for row in metrics["prompts"]] == [p.id for p in prompts("ood")]
    assert all(row["logit_kl"] is None and row["samples"] == 3 for row in metrics["prompts"])
    assert not (workdir / "ssot" / "logit_kl.jsonl").exists()
    samples = _samples(workdir / "ssot")
    assert all(s["value"] is None for s in samples if "<answer>" not in s["text"])


def test_a_pattern_without_a_group_is_refused(workdir):
    with pytest.raises(ValueError, match="needs a group"):
        _job(workdir, "x", evaluation="ssot", answer_pattern="<answer>")


def test_a_preempted_run_resumes_to_the_uninterrupted_samples(workdir, evaluated, monkeypatch):
    import calibft.evals.structured.runner as structured

    job = _job(workdir, "resumed", checkpoint_dir=str(workdir / "checkpoint"))
    real, calls = structured.sample_texts, []

    def preempted_after_two_prompts(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("preempted")
        return real(*args, **kwargs)

    monkeypatch.setattr(structured, "sample_texts", preempted_after_two_prompts)
    with pytest.raises(KeyboardInterrupt):
        run(job)
    assert sorted(p.name for p in (workdir / "checkpoint").glob("*.jsonl.gz")) == [
        "bernoulli-001.jsonl.gz", "poisson-001.jsonl.gz",
    ]  # fmt: skip
    calls.clear()
    run(job)
    assert len(calls) == 2  # only the prompts left
    assert (workdir / "resumed" / "samples.jsonl.gz").read_bytes() == (evaluated / "samples.jsonl.gz").read_bytes()
    assert not (workdir / "checkpoint").exists()


@pytest.mark.slow
def test_a_subset_of_prompts_gets_the_results_of_the_full_run(workdir, evaluated):
    """A smoke run's few prompts (`prompt_ids`): each with the samples and path KL it has in the full run."""
    chosen = ["bernoulli-001", "poisson-001"]  # in the order of the split
    run(_job(workdir, "subset", prompt_ids=chosen))
    full, subset = _samples(evaluated), _samples(workdir / "subset")
    assert subset == [s for s in full if s["id"] in chosen]
    rows = {row["id"]: row for row in map(json.loads, (evaluated / "logit_kl.jsonl").read_text().splitlines())}
    mine = [json.loads(line) for line in (workdir / "subset" / "logit_kl.jsonl").read_text().splitlines()]
    assert [row["id"] for row in mine] == chosen
    for row in mine:  # other batches of paths: the same values up to the order of the arithmetic
        assert row["path_kl"] == pytest.approx(rows[row["id"]]["path_kl"], rel=1e-5, abs=1e-7)
    metrics = json.loads((workdir / "subset" / "metrics.json").read_text())
    assert [row["id"] for row in metrics["prompts"]] == chosen


# ---- protocol switch answer_reasoning ------------------------------------------------------------------------


def _written(monkeypatch, tokenizer, texts: list[str]) -> None:
    """Every sampled answer is one of `texts` in turn, as the model wrote it (decoded by the real tokenizer)."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]

    def sample(model, prompt_ids, settings, stops, seed, progress=False):
        n = settings.num_samples
        return generation.Generations([ids[i % len(ids)] for i in range(n)], np.ones(n, dtype=bool))

    monkeypatch.setattr(generation, "sample", sample)


ANSWER_REASONING = {
    value: resolve({"switches": {"answer_reasoning": value}}) for value in ("release", "strip_reasoning")
}


@pytest.mark.parametrize(
    ("reasoning", "values", "stored"),
    [
        # the release's strip_thinking_trace: blocks in any case; a stray close tag stays, with what precedes it. The
        # stored text is the decoded answer, with its reasoning
        ("release", [3.0, None, 2.0], ["<THINK>7</THINK>3", "7</think>3", "<think>x</think>2"]),
        # calibft.lm.chat.strip_reasoning: lower-case tags only; what precedes a stray close tag removed
        ("strip_reasoning", [None, 3.0, 2.0], ["<THINK>7</THINK>3", "3", "2"]),
    ],
)
def test_structured_answers_lose_their_reasoning_by_the_switch(workdir, monkeypatch, reasoning, values, stored):
    _written(monkeypatch, load_tokenizer(workdir / "tiny"), ["<THINK>7</THINK>3", "7</think>3", "<think>x</think>2"])
    sampling = {"samples_per_prompt": 3, "max_new_tokens": 4}
    job = _job(workdir, f"reasoning_{reasoning}", tries=None, prompt_ids=["poisson-001"], sampling=sampling)
    run(replace(job, protocol=ANSWER_REASONING[reasoning]))
    samples = _samples(workdir / f"reasoning_{reasoning}")
    assert [s["value"] for s in samples] == values and [s["text"] for s in samples] == stored


@pytest.mark.parametrize(
    ("reasoning", "strips_thinking", "value"),
    [("release", False, 1.0), ("release", True, 2.0), ("strip_reasoning", False, 2.0), ("strip_reasoning", True, 2.0)],
)
def test_ssot_answers_lose_their_reasoning_by_the_switch_and_the_model(
    workdir, monkeypatch, reasoning, strips_thinking, value
):
    """The release removes `<think>` blocks before SSOT extraction only for its Qwen3 family
    (`release_strips_thinking`); `strip_reasoning` removes them for every model."""
    _written(monkeypatch, load_tokenizer(workdir / "tiny"), ["<think><answer>1</answer></think><answer>2</answer>"])
    name = f"ssot_reasoning_{reasoning}_{strips_thinking}"
    job = _job(
        workdir, name, evaluation="ssot", tries=None, prompt_ids=["poisson-001"],
        sampling={"samples_per_prompt": 1, "max_new_tokens": 4}, protocol=ANSWER_REASONING[reasoning],
        release_prompts=str(REPO / "profiles" / "demo" / "fixtures" / "ssot" / "ssot_prompts.py"),
        release_strips_thinking=strips_thinking,
    )  # fmt: skip
    run(job)
    assert [s["value"] for s in _samples(workdir / name)] == [value]
