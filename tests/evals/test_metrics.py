import math

import numpy as np
import pytest
from scipy import stats

from calibft.data.families import family
from calibft.evals.metrics import (
    EXACT_W1_LEVELS,
    exact_aggregate,
    exact_kl,
    exact_wasserstein1,
    family_means,
    family_median,
    parse_number,
    sampled_w1_spread,
    valid_mask,
    w1_scale,
    wasserstein1,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3.0),
        ("-2.5", -2.5),
        ("+.5", 0.5),
        ("1.", 1.0),
        ("0.00001", 1e-5),
        ("1e3", 1000.0),
        ("2.5E-2", 0.025),
        ("  4.20000\n", 4.2),
        ("007", 7.0),
    ],
)
def test_parse_number_accepts_plain_numbers(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "1,000",
        "1/2",
        "3 4",
        "inf",
        "nan",
        "0x10",
        "--1",
        "1e",
        ".",
        "1.2.3",
        "$5",
        "5%",
        "1e400",
        "The answer is 3",
        "3.0.",
        "e5",
        "+-1",
        "1_000",
    ],
)
def test_parse_number_rejects_everything_else(text):
    assert parse_number(text) is None


def test_validity_of_integer_families_uses_the_tolerance():
    values = np.array([-1, 0, 1.0, 2.5, 3 + 1e-10, 3 + 1e-6, np.nan, np.inf, 1e6])
    assert valid_mask(values, "poisson", {"lambda": 4.0}).tolist() == [
        False,
        True,
        True,
        False,
        True,
        False,
        False,
        False,
        True,
    ]


def test_validity_at_support_edges():
    truncnorm = {"mu": 0.0, "sigma": 1.0, "lower": -1.0, "upper": 1.0}
    assert valid_mask(np.array([-1.0, 1.0, -1.0001, 1.0001, 0.0]), "truncnorm", truncnorm).tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert valid_mask(np.array([0.0, 1.0, 0.5, 2.0, -0.0]), "bernoulli", {"p": 0.5}).tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert valid_mask(np.array([0.0, -1e-9, 1e300]), "exponential", {"lambda": 2.0}).tolist() == [True, False, True]
    assert valid_mask(np.array([-1e300, 1e300, -np.inf]), "gaussian", {"mu": 0.0, "sigma": 1.0}).tolist() == [
        True,
        True,
        False,
    ]


def test_w1_hand_computed():
    # quantiles of U(0, 1) at 0.25 and 0.75: (|0 - 0.25| + |1 - 0.75|) / 2
    assert wasserstein1(np.array([1.0, 0.0]), stats.uniform(0, 1)) == pytest.approx(0.25)
    # one sample at the median of N(0, 1)
    assert wasserstein1(np.array([0.0]), stats.norm()) == pytest.approx(0.0)
    assert math.isnan(wasserstein1(np.array([]), stats.norm()))


@pytest.mark.parametrize(
    ("family_id", "params"),
    [("gaussian", {"mu": 1.0, "sigma": 2.0}), ("poisson", {"lambda": 4.0}), ("weibull", {"k": 1.5, "lambda": 1.5})],
)
def test_w1_equals_scipy_between_samples_and_law_quantiles(family_id, params, rng):
    law = family(family_id).law(params)
    samples = law.rvs(size=500, random_state=rng) * 1.3 + 0.2
    n = len(samples)
    expected = stats.wasserstein_distance(samples, law.ppf((np.arange(1, n + 1) - 0.5) / n))
    assert wasserstein1(samples, law) == pytest.approx(expected, rel=1e-12)


def test_w1_scale_is_the_90_percent_range():
    assert w1_scale(stats.norm(0, 1)) == pytest.approx(2 * 1.6448536269514722)
    assert w1_scale(stats.bernoulli(0.5)) == 1.0
    assert w1_scale(stats.uniform(2, 10)) == pytest.approx(9.0)


def test_astronomical_samples_give_a_finite_w1_while_it_fits_a_float():
    assert wasserstein1(np.array([1e308, 1e308]), stats.norm()) == pytest.approx(1e308)
    assert wasserstein1(np.array([1.7e308, -1.7e308]), stats.norm()) == pytest.approx(1.7e308)


def test_family_aggregation_with_undefined_families():
    families = ["a", "a", "b", "c"]
    means = family_means([1.0, None, 3.0, 10.0], families)
    assert means == {"a": 1.0, "b": 3.0, "c": 10.0}
    assert family_median(means) == 3.0
    means = family_means([1.0, 2.0, math.inf, None], families)
    assert means == {"a": 1.5, "b": None, "c": None}
    assert family_median(means) is None
    assert family_median({"a": 1.0, "b": 4.0}) == 2.5
    assert family_median({}) is None


# ------------------------------------------------------------------------------------------------------------
# Exact distributions: W1 and KL from known probabilities


def test_exact_w1_hand_computed():
    uniform = stats.uniform(0, 1)
    # all mass at 0.5: the integral of |0.5 - u| over [0, 1]; half at 0 and half at 1: twice that of u over [0, 0.5]
    assert exact_wasserstein1(np.array([0.5]), np.array([3.0]), uniform) == pytest.approx(0.25, rel=1e-6)
    assert exact_wasserstein1(np.array([1.0, 0.0]), np.array([0.2, 0.2]), uniform) == pytest.approx(0.25, rel=1e-6)
    assert math.isnan(exact_wasserstein1(np.array([0.5]), np.array([0.0]), uniform))


def test_exact_w1_equals_scipy_where_its_midpoint_rule_is_exact():
    """`exact_wasserstein1` is the midpoint rule over N = EXACT_W1_LEVELS levels of the integral over u of
    |Q(u) - F^-1(u)|, which is W1. Where every step of both CDFs falls on a multiple of 1/N, both quantile functions
    are constant on each level's cell, and the rule is the integral: W1 itself, which SciPy's
    `wasserstein_distance` computes independently, through the CDFs."""
    law = stats.binom(3, 0.5)  # CDF steps at 1/8, 1/2 and 7/8
    support = np.arange(0, 4)
    values = np.array([0.3, 1.5, 2.75, 4.0, 6.5, 9.125])
    probs = np.array([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])  # CDF steps at multiples of 1/N (up to rounding, far from
    # the levels' midpoints, which lie 1/(2N) from them)
    want = stats.wasserstein_distance(values, support, probs, law.pmf(support))
    # What is left is float64 rounding: N terms |Q - F^-1|, each within an ulp, summed pairwise by numpy (relative
    # error below about log2(N) * 2^-53, 2e-15), against SciPy's sum over 9 steps; 1e-12 leaves 500 times that.
    assert exact_wasserstein1(values, probs, law) == pytest.approx(want, rel=1e-12)


def test_exact_w1_is_within_its_midpoint_rules_error_bound_of_scipy():
    """Against a Poisson law, whose CDF steps fall between levels, the midpoint rule errs on the cells where a
    quantile function steps: on each by at most 1/N of that step's height. In all by at most (the span of our
    values + the span of F^-1 from 0 to the last level's midpoint, q) / N, plus the last cell's tail beyond q,
    E[(X - q)+] (the first cell has none: F^-1 is 0 all over it): 2.8e-4 here, where the error is 5.5e-6."""
    law = stats.poisson(4.0)
    support = np.arange(0, 60)  # the pmf beyond is below 1e-30
    values = np.array([0.0, 2.0, 3.0, 5.0, 9.0, 12.0])
    probs = np.array([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])
    want = stats.wasserstein_distance(values, support, probs, law.pmf(support))
    n = EXACT_W1_LEVELS
    first, last = law.ppf([0.5 / n, 1 - 0.5 / n])
    tail = float(np.sum(np.maximum(support - last, 0) * law.pmf(support)))
    bound = (np.ptp(values) + last - first) / n + tail
    assert abs(exact_wasserstein1(values, probs, law) - want) <= bound


def test_exact_w1_is_what_the_sampled_w1_of_many_samples_tends_to():
    rng = np.random.default_rng(5)
    law = stats.norm(2.0, 1.5)
    values = np.round(rng.normal(2.0, 2.0, 12), 2)
    probs = rng.dirichlet(np.ones(12))
    exact = exact_wasserstein1(values, probs, law)
    samples = rng.choice(values, size=1_000_000, p=probs)
    assert wasserstein1(samples, law) == pytest.approx(exact, rel=1e-2)
    # a few samples are far off: the exact value is not the sampled one by construction
    assert abs(wasserstein1(samples[:30], law) - exact) > 1e-4


def test_exact_kl_is_scipys_entropy_on_the_space_and_counts_the_mass_off_it():
    target = np.array([0.1, 0.4, 0.0, 0.5])
    model = np.array([0.05, 0.2, 0.3, 0.15])  # 0.3 of the model's mass is off the space
    kl = exact_kl(target, model)
    assert kl["mass"] == pytest.approx(0.7)
    assert kl["on_space"] == pytest.approx(stats.entropy(target, model / model.sum()), rel=1e-12)
    assert kl["sequences"] == pytest.approx(kl["on_space"] - math.log(0.7), rel=1e-12)
    assert kl["sequences"] == pytest.approx(
        float(np.sum([q * math.log(q / p) for q, p in zip(target, model, strict=True) if q]))
    )
    assert exact_kl(target, np.array([0.0, 0.5, 0.2, 0.3]))["on_space"] == math.inf  # a target value with no mass


def test_the_sampled_w1_spread_of_a_point_mass_is_its_one_w1():
    """Every draw of a point mass at 2 is n copies of 2: the spread collapses to the W1 of those samples, by
    hand mean_i |2 - F^-1((i - 0.5) / n)|."""
    law = stats.norm(0, 1)
    n = 7
    by_hand = float(np.mean(np.abs(2 - law.ppf((np.arange(1, n + 1) - 0.5) / n))))
    spread = sampled_w1_spread(np.array([1.0, 2.0, 3.0]), np.array([0, 5.0, 0]), law, n, 20, np.random.default_rng(0))
    assert spread == pytest.approx((by_hand, by_hand), rel=1e-12)
    assert sampled_w1_spread(np.array([1.0]), np.array([1.0]), law, 0, 20, np.random.default_rng(0)) is None
    assert sampled_w1_spread(np.array([1.0]), np.array([0.0]), law, 5, 20, np.random.default_rng(0)) is None


def test_the_sampled_w1_of_the_distribution_itself_falls_within_its_spread_99_percent_of_the_time():
    """Sample sets drawn from the discrete law itself land within the spread at about SPREAD_LEVEL (0.99): 2000
    sets of 50 samples, within in 1962 to 1996 of them (a binomial(2000, 0.99) is outside that with probability
    < 1e-4; a spread too narrow or too wide leaves it)."""
    rng = np.random.default_rng(3)
    law = stats.gamma(2.0)
    values = np.linspace(0.05, 8, 160)
    probs = law.pdf(values) * rng.uniform(0.5, 1.5, len(values))  # a law near the target, not equal to it
    low, high = sampled_w1_spread(values, probs, law, 50, 20_000, rng)
    within = 0
    for _ in range(2000):
        w1 = wasserstein1(rng.choice(values, 50, p=probs / probs.sum()), law)
        within += low <= w1 <= high
    assert 1962 <= within <= 1996


def test_exact_aggregate_takes_the_structured_rules():
    rows = [
        {"family": "a", "w1_norm": 0.1, "kl_on_space": 1.0, "kl_sequences": 3.0, "mass": 0.2},
        {"family": "a", "w1_norm": 0.3, "kl_on_space": 3.0, "kl_sequences": 5.0, "mass": 0.4},
        {"family": "b", "w1_norm": 0.8, "kl_on_space": None, "kl_sequences": 1.0, "mass": 0.9},
        {"family": "c", "w1_norm": 0.4, "kl_on_space": 2.0, "kl_sequences": 2.0, "mass": 0.6},
    ]
    aggregate = exact_aggregate(rows, "mean")
    assert aggregate["w1_norm"] == pytest.approx(0.4)  # median of 0.2, 0.8, 0.4
    assert aggregate["kl_on_space"] is None  # family b has no finite value
    assert aggregate["kl_sequences"] == pytest.approx((4.0 + 1.0 + 2.0) / 3)
    assert aggregate["mass"] == pytest.approx((0.3 + 0.9 + 0.6) / 3)
    assert exact_aggregate(rows[:2] + rows[3:], "median")["kl_on_space"] == pytest.approx(2.0)
