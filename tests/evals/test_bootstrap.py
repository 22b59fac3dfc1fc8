"""Bootstrap intervals of the structured aggregates (calibft.evals.bootstrap)."""

import math

import numpy as np
import pytest
from scipy import stats

from calibft.evals.bootstrap import PromptSamples, percentile_interval, structured_intervals
from calibft.evals.structured import score
from calibft.grid import prompts

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
