"""Bootstrap intervals of the structured aggregates and the shared resampling helpers (calibft.evals.bootstrap)."""

import math

import numpy as np
import pytest
from scipy import stats

from calibft.data.grid import prompts
from calibft.evals import bootstrap
from calibft.evals.bootstrap import (
    PromptSamples,
    interval_block,
    paired_draws,
    percentile_interval,
    resample_indices,
    resampled_sums,
    structured_intervals,
)
from calibft.evals.structured.metrics import score

OOD = prompts("ood")
# two families, two prompts each
CHOSEN = [p for family in ("poisson", "weibull") for p in [q for q in OOD if q.family == family][:2]]


def simulated(rng, valid_probability, n):
    """Each prompt's n samples: draws from its own law, each valid with its probability."""
    samples = []
    for prompt, p in zip(CHOSEN, valid_probability, strict=True):
        law = PromptSamples(prompt, np.empty(0)).law
        values = law.rvs(size=n, random_state=rng).astype(float)
        values[rng.random(n) >= p] = math.nan
        samples.append(PromptSamples(prompt, values))
    return samples


@pytest.mark.slow
def test_the_valid_rate_interval_covers_the_truth_as_often_as_it_says():
    # the aggregate valid rate is the mean of the family means of the prompts' rates
    probability = [0.61, 0.93, 0.77, 0.83]  # the truth, 0.785, is no mean of k / 40 rates: no rounding tie
    truth = np.mean([np.mean(probability[:2]), np.mean(probability[2:])])
    rng, trials = np.random.default_rng(0), 200
    covered = 0
    for trial in range(trials):
        interval = structured_intervals(simulated(rng, probability, 40), seed=trial, replicates=200)["valid_rate"]
        covered += interval[0] <= truth <= interval[1]
    low, high = stats.binom.ppf([0.0005, 0.9995], trials, 0.95)  # 99.9% of what a 95% interval would give
    assert low <= covered <= high, covered


def test_an_interval_is_seeded_and_holds_the_estimate():
    samples = simulated(np.random.default_rng(1), [0.5, 0.7, 0.9, 1.0], 60)
    first = structured_intervals(samples, seed=7, replicates=300)
    assert first == structured_intervals(samples, seed=7, replicates=300)
    assert first != structured_intervals(samples, seed=8, replicates=300)
    records = [
        {"id": s.prompt.id, "value": None if math.isnan(v) else v, "valid": not math.isnan(v)}
        for s in samples
        for v in s.values
    ]
    metrics = score(CHOSEN, records, replicates=300, bootstrap_seed=7)
    assert metrics["intervals"] == first
    for metric in ("w1_norm", "valid_rate"):
        low, high = first[metric]
        assert low <= metrics["aggregate"][metric] <= high, metric
    assert first["logit_kl"] is None and first["undefined"] == {"w1_norm": 0, "logit_kl": 300, "valid_rate": 0}


def test_fixed_prompts_keep_their_logit_kl_and_resampled_prompts_move_it():
    samples = simulated(np.random.default_rng(2), [1.0] * 4, 30)
    for sample, kl in zip(samples, [0.1, 0.5, 0.2, 0.4], strict=True):
        sample.logit_kl = kl
    fixed = structured_intervals(samples, seed=3, replicates=200)
    assert fixed["logit_kl"] == pytest.approx([0.3, 0.3])  # mean of the family means, (0.3 + 0.3) / 2
    assert fixed["valid_rate"] == [1.0, 1.0]
    moved = structured_intervals(samples, seed=3, replicates=200, resample_prompts=True)
    assert moved["logit_kl"][0] < 0.3 < moved["logit_kl"][1]
    assert moved["resampled"] == "prompts within families, samples within prompts"


def test_a_family_without_valid_samples_leaves_w1_undefined():
    samples = simulated(np.random.default_rng(4), [0.0, 0.0, 1.0, 1.0], 20)
    intervals = structured_intervals(samples, seed=0, replicates=50)
    assert intervals["w1_norm"] is None and intervals["undefined"]["w1_norm"] == 50


def test_percentile_interval_by_hand():
    assert percentile_interval([None, None]) is None
    assert percentile_interval(list(range(101)), level=0.9) == pytest.approx([5.0, 95.0])
    # NaN and infinities are undefined replicates, as None is
    assert percentile_interval(np.array([math.nan, math.inf, *range(101)]), level=0.9) == pytest.approx([5.0, 95.0])


def test_the_mean_of_resampled_sums_covers_a_normal_mean_as_often_as_it_says():
    # the percentile interval of a mean of n normal draws covers the true mean about 95% of the time; the data
    # are continuous, so the truth is never an interval's bound
    rng, trials, n = np.random.default_rng(0), 300, 100
    covered = 0
    for trial in range(trials):
        values = rng.normal(2.0, 1.0, size=(n, 1))
        means = resampled_sums(values, np.random.default_rng(trial), 400)[:, 0] / n
        low, high = percentile_interval(means)
        covered += low <= 2.0 <= high
    low, high = stats.binom.ppf([0.0005, 0.9995], trials, 0.95)  # 99.9% of what a 95% interval would give
    assert low <= covered <= high, covered


def test_resampled_sums_by_hand(monkeypatch):
    values = np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0]])
    sums = resampled_sums(values, np.random.default_rng(5), 7)
    picks = resample_indices(np.random.default_rng(5), 3, 7)  # one block: the same draws
    assert sums == pytest.approx(values[picks].sum(axis=1))
    assert sums[:, 1] == pytest.approx(10 * sums[:, 0])  # a row is drawn whole
    assert np.array_equal(sums, resampled_sums(values, np.random.default_rng(5), 7))
    assert resampled_sums(np.full((4, 1), 2.5), np.random.default_rng(0), 3) == pytest.approx(np.full((3, 1), 10.0))
    assert np.array_equal(resampled_sums(np.empty((0, 2)), np.random.default_rng(0), 3), np.zeros((3, 2)))
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 6)  # two replicates of three rows at a time: four blocks
    blocked = resampled_sums(values, np.random.default_rng(5), 7)
    assert blocked.shape == (7, 2) and np.array_equal(blocked, resampled_sums(values, np.random.default_rng(5), 7))


def test_an_interval_block_keeps_the_draws_asked_for_and_pairs_runs_drawn_alike():
    draws = {"a": np.arange(101.0), "b": np.array([math.nan] * 101)}
    block = interval_block(draws, seed=3, resampled="documents", level=0.9, kept=["a"], units={"ptb": 5})
    assert block["a"] == pytest.approx([5.0, 95.0]) and block["b"] is None
    assert block["undefined"] == {"a": 0, "b": 101} and block["replicates"] == 101
    assert block["draws"] == {"a": list(np.arange(101.0))} and block["units"] == {"ptb": 5}
    assert "draws" not in interval_block(draws, seed=3, resampled="documents")
    other = interval_block({"a": 2 * np.arange(101.0)}, seed=3, resampled="documents", kept=["a"], units={"ptb": 5})
    assert paired_draws([block, other], "a") == pytest.approx(np.stack([np.arange(101.0), 2 * np.arange(101.0)]))
    # runs resampled differently (another seed, other units) or without replicates do not pair
    for changed in ({"seed": 4}, {"units": {"ptb": 6}}, {"draws": {}}):
        assert paired_draws([block, other | changed], "a") is None
    assert paired_draws([block, None], "a") is None and paired_draws([], "a") is None
