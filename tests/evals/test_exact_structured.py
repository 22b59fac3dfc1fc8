"""The exact structured evaluation's runner: its outputs recompute from the stored probabilities with SciPy, it
resumes after a preemption, and it refuses tries of another space."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calibft.core.io import load_npz, read_jsonl
from calibft.data.families import FAMILIES
from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, spaces_for_prompts
from calibft.data.trie import trie_set_for_spaces
from calibft.evals.exact import runner as exact_runner
from calibft.evals.exact.job import ExactJob
from calibft.evals.exact.metrics import on_space_indices, score
from calibft.evals.exact.runner import run
from calibft.evals.metrics import EXACT_W1_LEVELS
from calibft.evals.structured.job import StructuredJob
from calibft.evals.structured.runner import run as run_structured
from calibft.lm.models import load_tokenizer

CHAT = {"template_kwargs": {"enable_thinking": False}}
IDS = ("poisson-001", "weibull-001", "bernoulli-001")
LAWS = {p.id: FAMILIES[p.family].law(p.params) for p in prompts("ood") if p.id in IDS}
SCALE_QUANTILES = (0.05, 0.95)  # W1_norm's normalizer, Q95 - Q05 of the target law (docs/metrics.md)
LEVELS = (np.arange(1, EXACT_W1_LEVELS + 1) - 0.5) / EXACT_W1_LEVELS  # the exact W1's levels (docs/metrics.md)
SAMPLING = {"samples_per_prompt": 60, "max_new_tokens": 12, "batch_size": 30}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    """A quickly trained tiny model, the evaluation space (d=5, 16384 bins) of a few held-out prompts and its
    tries, and the structured samples of the base model."""
    root = tmp_path_factory.mktemp("exact")
    (root / "tiny").symlink_to(briefly_trained_model)
    chosen = [p for p in prompts("ood") if p.id in IDS]
    spaces = SpaceSet.from_spaces([p.id for p in chosen], spaces_for_prompts(chosen, 5, 16384))
    spaces.save(root / "space.npz")
    trie_set_for_spaces(load_tokenizer(root / "tiny"), spaces).save(root / "tries.npz")
    run_structured(
        StructuredJob(
            evaluation="structured", model=str(root / "tiny"), model_key="tiny", tokenizer=str(root / "tiny"),
            chat=CHAT, condition="base", split="ood", seed=11, precision="fp32", sampling=SAMPLING,
            out_dir=str(root / "structured"), tries=str(root / "tries.npz"), bootstrap_replicates=0,
        )
    )  # fmt: skip
    return root


def _job(root: Path, out: str, **changes) -> ExactJob:
    job = ExactJob(
        model=str(root / "tiny"), model_key="tiny", tokenizer=str(root / "tiny"), chat=CHAT, condition="base",
        split="ood", seed=11, precision="fp32", sampling=SAMPLING, out_dir=str(root / out),
        tries=str(root / "tries.npz"), space=str(root / "space.npz"),
        samples=str(root / "structured" / "samples.jsonl.gz"), batch_nodes=64, spread_draws=50,
    )  # fmt: skip
    return replace(job, **changes)


@pytest.fixture(scope="module")
def evaluated(workdir) -> Path:
    run(_job(workdir, "exact"))
    return workdir / "exact"


def test_metrics_recompute_from_the_stored_probabilities_with_scipy(workdir, evaluated):
    arrays, _ = load_npz(evaluated / "probabilities.npz", required=("ids", "offsets", "values"))
    metrics = json.loads((evaluated / "metrics.json").read_text())
    spaces = SpaceSet.load(workdir / "space.npz")
    samples = read_jsonl(workdir / "structured" / "samples.jsonl.gz")
    assert list(arrays["ids"]) == [row["id"] for row in metrics["prompts"]]
    assert sorted(arrays["ids"]) == sorted(IDS)
    for i, row in enumerate(metrics["prompts"]):
        part = slice(arrays["offsets"][i], arrays["offsets"][i + 1])
        model, target = arrays["model_probs"][part], arrays["target_probs"][part]
        space = spaces.space(spaces.index(row["id"]))
        np.testing.assert_array_equal(target, space.probs)
        np.testing.assert_array_equal(arrays["values"][part], [float(v) for v in space.values])
        assert 0 < model.sum() <= 1 + 1e-9
        assert row["mass"] == pytest.approx(model.sum(), rel=1e-12)
        assert row["kl_on_space"] == pytest.approx(stats.entropy(target, model / model.sum()), rel=1e-9)
        assert row["kl_sequences"] == pytest.approx(np.sum(target * np.log(target / model)), rel=1e-9)
        assert row["w1_norm"] == pytest.approx(row["w1"] / row["w1_scale"], rel=1e-12)
        # W1_norm by its definition (docs/metrics.md), independently: SciPy's W1 between the model's distribution
        # renormalized on the space and the target's quantiles at the N levels' midpoints, over the target's
        # Q95 - Q05. The exact W1 pairs those quantiles with the model's quantile function at the midpoints (a
        # midpoint rule), SciPy integrates it across each level's cell: they differ where that function steps
        # inside a cell, by at most 1/N of the step, so by at most the span of the values over N in all; 1e-12
        # for the float64 sums.
        law = LAWS[row["id"]]
        low, high = law.ppf(SCALE_QUANTILES)
        w1 = stats.wasserstein_distance(arrays["values"][part], law.ppf(LEVELS), model)
        bound = np.ptp(arrays["values"][part]) / EXACT_W1_LEVELS / (high - low)
        assert abs(row["w1_norm"] - w1 / (high - low)) <= bound + 1e-12, row["id"]
        mine = [s for s in samples if s["id"] == row["id"]]
        strings = {v.decode() for v in space.values}
        assert row["on_space"]["samples"] == sum(s["text"] in strings for s in mine)
        assert row["sampled"]["valid"] == sum(s["valid"] for s in mine)
        low, high = row["on_space"]["spread"] or (0, 0)
        assert low <= high
    within = [row["on_space"]["within"] for row in metrics["prompts"] if row["on_space"]["within"] is not None]
    assert metrics["aggregate"]["within_spread"] == {
        "prompts": len(within), "within": sum(within), "fraction": sum(within) / len(within) if within else None,
    }  # fmt: skip
    assert metrics["evaluation"] == "exact" and metrics["next_token"]["temperature"] == 1.0
    assert all(row["forwarded_tokens"] > 0 for row in metrics["prompts"])


def test_on_space_answers_are_the_canonical_strings_only():
    strings = np.array([b"0.5", b"1.0", b"1.5"])
    records = [{"text": "1.0"}, {"text": "1"}, {"text": "0.5"}, {"text": "0.50"}, {"text": "1.0"}]
    assert on_space_indices(records, strings).tolist() == [1, 0, 1]


def test_score_takes_family_means_then_the_median_across_families():
    def row(family: str, w1: float | None, within: bool | None, high: float | None = 1.0) -> dict:
        figures = {"w1_norm": w1, "kl_on_space": 1.0, "kl_sequences": 2.0, "mass": 0.5}
        bounds = {k: [None if v is None else v / 2, None if v is None else high] for k, v in figures.items()}
        return {"family": family, **figures, "on_space": {"within": within}, "bounds": bounds}

    rows = [row("a", 0.1, True), row("a", 0.3, False), row("b", 0.5, None), row("c", 0.9, True)]
    aggregate = score(rows)["aggregate"]
    assert aggregate["w1_norm"] == pytest.approx(0.5)  # median of 0.2, 0.5, 0.9
    assert aggregate["within_spread"] == {"prompts": 3, "within": 2, "fraction": pytest.approx(2 / 3)}
    # the bounds aggregate as the figures do: the median of the family means of each side
    assert aggregate["bounds"]["w1_norm"] == [pytest.approx(0.25), pytest.approx(1.0)]
    assert aggregate["bounds"]["mass"] == [pytest.approx(0.25), pytest.approx(1.0)]
    # one prompt with an unbounded upper side leaves the aggregate's open
    assert score([*rows, row("c", 0.2, None, high=None)])["aggregate"]["bounds"]["w1_norm"][1] is None
    assert score([row("a", None, None), row("b", 0.5, None)])["aggregate"]["w1_norm"] is None


def test_a_full_walks_figures_are_their_own_bounds(evaluated):
    metrics = json.loads((evaluated / "metrics.json").read_text())
    for row in metrics["prompts"]:
        for key in ("mass", "w1", "w1_norm", "kl_on_space", "kl_sequences"):
            assert row["bounds"][key] == [row[key], row[key]]
    aggregate = metrics["aggregate"]
    assert all(aggregate["bounds"][key] == [aggregate[key]] * 2 for key in ("w1_norm", "kl_on_space", "mass"))


def test_the_adaptive_walks_bounds_contain_the_full_walks_figures_within_the_tolerance(workdir, evaluated):
    """The same job with a tolerance: each prompt's bounds hold the full walk's figures and are no wider than the
    tolerance (W1 relative to the law's width), and the aggregates' bounds hold the full walk's aggregates."""
    tolerance = 0.01

    def inside(value: float, bounds: list[float | None]) -> bool:
        # the two walks feed a node in different batches: their float32 terms differ in the last bits
        low, high = bounds
        return low * (1 - 1e-5) - 1e-12 <= value <= (np.inf if high is None else high * (1 + 1e-5) + 1e-12)

    run(_job(workdir, "adaptive", w1_norm_tolerance=tolerance, mass_tolerance=tolerance))
    full, adaptive = (json.loads((workdir / f / "metrics.json").read_text()) for f in ("exact", "adaptive"))
    for exact, partial in zip(full["prompts"], adaptive["prompts"], strict=True):
        bounds = partial["bounds"]
        for key in ("mass", "w1_norm", "kl_on_space", "kl_sequences"):
            assert inside(exact[key], bounds[key]) and inside(partial[key], bounds[key]), key
        assert bounds["w1_norm"][1] - bounds["w1_norm"][0] <= tolerance
        assert bounds["mass"][1] - bounds["mass"][0] <= tolerance
    for key in ("w1_norm", "mass", "kl_on_space", "kl_sequences"):
        assert inside(full["aggregate"][key], adaptive["aggregate"]["bounds"][key]), key
    # where the bounds need (nearly) the whole trie, the walk costs little more than the full walk
    tokens = [sum(p["forwarded_tokens"] for p in run["prompts"]) for run in (adaptive, full)]
    assert tokens[0] <= 1.3 * tokens[1]


@pytest.mark.slow
def test_a_preempted_run_resumes_to_the_uninterrupted_results(workdir, evaluated, monkeypatch):
    job = _job(workdir, "resumed", checkpoint_dir=str(workdir / "checkpoint"))
    real, calls = exact_runner.value_probabilities, []

    def preempted_after_two_prompts(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("preempted")
        return real(*args, **kwargs)

    monkeypatch.setattr(exact_runner, "value_probabilities", preempted_after_two_prompts)
    with pytest.raises(KeyboardInterrupt):
        run(job)
    assert len(list((workdir / "checkpoint").glob("*.jsonl.gz"))) == 2
    calls.clear()
    run(job)
    assert len(calls) == 1  # only the prompt left
    first, resumed = (json.loads((workdir / f / "metrics.json").read_text()) for f in ("exact", "resumed"))
    assert resumed["prompts"] == first["prompts"]
    assert not (workdir / "checkpoint").exists()


def test_tries_of_another_space_are_refused(workdir, tmp_path):
    spaces = SpaceSet.load(workdir / "space.npz")
    other = replace(spaces, probs=spaces.probs[::-1].copy())
    other.save(tmp_path / "other.npz")
    with pytest.raises(ValueError, match="were not built from the space"):
        run(_job(workdir, "refused", space=str(tmp_path / "other.npz")))
