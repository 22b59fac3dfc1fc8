"""Scoring of sampled numbers against a target law (docs/metrics.md, Structured sampling).

- `parse_number`: the text of an answer (reasoning stripped) as a float, or None when it is not exactly one
  plain decimal or scientific number.
- `valid_mask`: finite, inside the family's support, and within 1e-9 of an integer for integer families.
- `wasserstein1`: W1 = mean_i |x_(i) - F^-1((i - 0.5) / N)| over the N sorted valid samples; the normalized W1
  divides it by the target's Q95 - Q05.
- `exact_wasserstein1`: the same coupling for a discrete distribution known exactly (values and their
  probabilities, `calibft.lm.trie_walk`), its quantiles taking the place of the sorted samples.
- `exact_kl`: KL(target || model) over the values of an output space, with the model's probabilities
  renormalized on the space and as they are (the mass off the space counted).
- `sampled_w1_spread`: the central interval of the sampled W1 that N samples of a known discrete distribution
  would give, by simulation.
- `family_median`: mean of the finite per-prompt values within each family, then the median across families;
  undefined (None) as soon as one family has no finite value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from calibft.core.protocol import SWITCH
from calibft.data.families import Params, family

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
INTEGER_TOLERANCE = 1e-9
SCALE_QUANTILES = (0.05, 0.95)


def parse_number(text: str) -> float | None:
    """The number an answer states, or None: after stripping whitespace the whole text must be one number."""
    text = text.strip()
    if not NUMBER.fullmatch(text):
        return None
    value = float(text)  # a long digit string overflows to inf rather than raising
    return value if math.isfinite(value) else None


def valid_mask(values: np.ndarray, family_id: str, params: Params) -> np.ndarray:
    """True where a parsed value (NaN: did not parse) is a possible draw of the family's law."""
    spec = family(family_id)
    values = np.asarray(values, dtype=np.float64)
    lower, upper = spec.support(params)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(values) & (values >= lower) & (values <= upper)
        if spec.integer:
            valid &= np.abs(values - np.round(values)) <= INTEGER_TOLERANCE
    return valid


def coupling_quantiles(law, n: int) -> np.ndarray:
    """The target's quantiles that W1 pairs with `n` sorted samples: F^-1((i - 0.5) / n), i = 1..n."""
    return law.ppf((np.arange(1, n + 1) - 0.5) / n)


def wasserstein1(samples: np.ndarray, law, quantiles: np.ndarray | None = None) -> float:
    """W1 between the empirical law of `samples` and a frozen SciPy law; NaN without samples. `quantiles`, when
    given, are `coupling_quantiles(law, len(samples))`, computed once for many samples of one size."""
    samples = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(samples)
    if n == 0:
        return math.nan
    quantiles = coupling_quantiles(law, n) if quantiles is None else quantiles
    with np.errstate(over="ignore"):  # only a W1 beyond the float range overflows; it is reported as undefined
        return float(np.sum(np.abs(samples - quantiles) / n))


# quantile levels of `exact_wasserstein1`: its midpoint rule errs by O(1 / levels), on the cells where the discrete
# law's quantile function jumps (tests/evals/test_metrics.py bounds it)
EXACT_W1_LEVELS = 100_000


def distribution_quantiles(values: np.ndarray, probs: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The quantile function of the discrete law with probabilities `probs` (renormalized) on `values`, at
    `levels` in (0, 1): the smallest value whose cumulative probability reaches the level."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(np.asarray(probs, dtype=np.float64)[order])
    cumulative /= cumulative[-1]
    index = np.searchsorted(cumulative, levels, side="left")
    return np.asarray(values, dtype=np.float64)[order][np.minimum(index, len(order) - 1)]


def exact_wasserstein1(
    values: np.ndarray, probs: np.ndarray, law, levels: int = EXACT_W1_LEVELS, quantiles: np.ndarray | None = None
) -> float:
    """W1 between the discrete law of `probs` (renormalized) on `values` and a frozen SciPy law, by the coupling
    of `wasserstein1` at `levels` levels: mean_i |Q(u_i) - F^-1(u_i)|, u_i = (i - 0.5) / levels, Q the discrete
    law's quantile function. It is the sampled W1 of `levels` samples placed at the discrete law's quantiles
    (what many samples' W1 tends to, without their noise); NaN without mass. `quantiles`, when given, are
    `coupling_quantiles(law, levels)`, computed once for several uses."""
    probs = np.asarray(probs, dtype=np.float64)
    if len(probs) == 0 or not probs.sum() > 0:
        return math.nan
    quantiles = coupling_quantiles(law, levels) if quantiles is None else quantiles
    ours = distribution_quantiles(values, probs, (np.arange(1, levels + 1) - 0.5) / levels)
    with np.errstate(over="ignore"):
        return float(np.mean(np.abs(ours - quantiles)))


def exact_kl(target: np.ndarray, model: np.ndarray) -> dict[str, float]:
    """KL(target || model) in nats over the values of a space, where the target puts all its mass: `on_space`
    with the model's probabilities renormalized on the space, `sequences` with them as they are (the model's
    mass off the space then counts: `sequences` = `on_space` - log `mass`), and `mass`, the model's mass on the
    space. Values the target gives no mass add nothing; a value the target gives mass and the model none makes
    both infinite."""
    target = np.asarray(target, dtype=np.float64)
    model = np.asarray(model, dtype=np.float64)
    target = target / target.sum()
    mass = float(model.sum())
    held = target > 0
    with np.errstate(divide="ignore"):
        sequences = float(np.sum(target[held] * (np.log(target[held]) - np.log(model[held]))))
    on_space = sequences + math.log(mass) if mass > 0 else math.inf
    return {"on_space": on_space, "sequences": sequences, "mass": mass}


# The central share of simulated sampled W1 values that `sampled_w1_spread` spans: at 99%, a run whose answers
# follow the exact distribution has about one prompt in a hundred outside, so a check over a hundred prompts
# does not turn on chance (at 95%, 5 are expected and 10 happen in a few percent of runs)
SPREAD_LEVEL = 0.99


def sampled_w1_spread(
    values: np.ndarray, probs: np.ndarray, law, n: int, draws: int, rng: np.random.Generator
) -> tuple[float, float] | None:
    """The central `SPREAD_LEVEL` interval of `wasserstein1` over `draws` sets of `n` samples drawn from the
    discrete law of `probs` (renormalized) on `values`: where the sampled W1 of `n` answers falls when the
    answers follow that law. None without samples or without mass."""
    probs = np.asarray(probs, dtype=np.float64)
    if n < 1 or not probs.sum() > 0:
        return None
    chosen = rng.choice(len(probs), size=(draws, n), p=probs / probs.sum())
    samples = np.sort(np.asarray(values, dtype=np.float64)[chosen], axis=1)
    with np.errstate(over="ignore"):
        w1 = np.mean(np.abs(samples - coupling_quantiles(law, n)), axis=1)
    low, high = np.quantile(w1, [(1 - SPREAD_LEVEL) / 2, (1 + SPREAD_LEVEL) / 2])
    return float(low), float(high)


def w1_scale(law) -> float:
    """Q95 - Q05 of the target law: what makes W1 comparable across families and parameters."""
    low, high = law.ppf(SCALE_QUANTILES)
    return float(high - low)


def finite_or_none(value: float) -> float | None:
    """A JSON-ready number: None where a metric is undefined (NaN) or overflowed (inf)."""
    return float(value) if math.isfinite(value) else None


REDUCTIONS = {"mean": np.mean, "median": np.median}


def _reduction(how: str):
    if how not in REDUCTIONS:
        raise ValueError(f"how must be one of {', '.join(REDUCTIONS)}, got {how!r}")
    return REDUCTIONS[how]


def family_means(values: Sequence[float | None], families: Sequence[str]) -> dict[str, float | None]:
    """Per family (in order of first appearance), the mean of its finite values; None when it has none."""
    return within_families(values, families, "mean")


def within_families(values: Sequence[float | None], families: Sequence[str], how: str) -> dict[str, float | None]:
    """Per family (in order of first appearance), the mean or median (`how`) of its finite values; None when it
    has none."""
    reduce = _reduction(how)
    values = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    families = np.asarray(families)
    reduced = {}
    for name in dict.fromkeys(families.tolist()):
        own = values[(families == name) & np.isfinite(values)]
        with np.errstate(over="ignore"):
            reduced[name] = finite_or_none(reduce(own)) if len(own) else None
    return reduced


def family_median(means: Mapping[str, float | None]) -> float | None:
    """The median across families of their means; None when a family has no finite estimate."""
    return across_families(means, "median")


def across_families(means: Mapping[str, float | None], how: str) -> float | None:
    """The mean or the median (`how`) across families of their means; None when a family has no finite estimate."""
    reduce = _reduction(how)
    if not means or any(v is None or not math.isfinite(v) for v in means.values()):
        return None
    return float(reduce(list(means.values())))


def family_rows(means: Mapping[str, Mapping[str, float | None]], families: Sequence[str]) -> list[dict]:
    """metrics.json's `families`: per family (in the order of `means`), its mean of each key and its number of
    prompts (`families`: each prompt's family)."""
    families = list(families)
    names = next(iter(means.values()))
    return [
        {"family": name, **{key: means[key][name] for key in means}, "num_prompts": families.count(name)}
        for name in names
    ]


def undefined_families(means: Mapping[str, float | None]) -> list[str]:
    """The families without a finite mean, which leave an aggregate across families undefined."""
    return [name for name, mean in means.items() if mean is None]


def exact_aggregate(rows: Sequence[Mapping], kl_across_families: str = "mean") -> dict:
    """The aggregate of an exact evaluation from its per-prompt rows, as the structured one's: normalized W1 the
    median across families of their means, the KLs the mean or median of the family means
    (`kl_across_families`, the logit KL's switch), the mass on the space the mean of the family means; None
    where a family has no finite value. With the family means it is computed from."""
    families = [row["family"] for row in rows]
    keys = ("w1_norm", "kl_on_space", "kl_sequences", "mass")
    means = {key: family_means([row[key] for row in rows], families) for key in keys}
    return {
        "w1_norm": family_median(means["w1_norm"]),
        "kl_on_space": across_families(means["kl_on_space"], kl_across_families),
        "kl_sequences": across_families(means["kl_sequences"], kl_across_families),
        "mass": across_families(means["mass"], "mean"),
        "family_means": means,
    }


def structured_aggregate(
    rows: Sequence[Mapping], logit_kl_across_families: str = "mean", w1_nonfinite_prompts: str = "undefined"
) -> dict:
    """The aggregate of a structured evaluation from its per-prompt rows (family, w1, w1_norm, logit_kl,
    valid_rate): W1 the median across families of their means (None when a family has no finite value), logit
    KL the mean or median of the family means (`logit_kl_across_families`, a switch of `calibft.core.protocol`; None
    without logit KL), valid rate the mean of the family means; with the family means it is computed from.

    A prompt whose W1 is not finite (`w1` None: no valid answer, or a W1 beyond the float range) makes its
    family's W1 undefined under `w1_nonfinite_prompts: undefined`, as the release's infinite W1 makes the family's
    mean infinite; under `dropped` the family's mean is that of its finite prompts. (A law without spread has a
    finite W1 and no normalized one: that prompt is left out of its family's mean either way.)"""
    allowed = SWITCH["w1_nonfinite_prompts"].values
    if w1_nonfinite_prompts not in allowed:
        raise ValueError(f"w1_nonfinite_prompts must be one of {', '.join(allowed)}, got {w1_nonfinite_prompts!r}")
    families = [row["family"] for row in rows]
    means = {key: family_means([row[key] for row in rows], families) for key in ("w1_norm", "logit_kl", "valid_rate")}
    if w1_nonfinite_prompts == "undefined":
        nonfinite = {row["family"] for row in rows if row["w1"] is None}
        means["w1_norm"] = {name: None if name in nonfinite else mean for name, mean in means["w1_norm"].items()}
    valid_rates = [v for v in means["valid_rate"].values() if v is not None]
    with_kl = any(row["logit_kl"] is not None for row in rows)
    return {
        "w1_norm": family_median(means["w1_norm"]),
        "logit_kl": across_families(means["logit_kl"], logit_kl_across_families) if with_kl else None,
        "valid_rate": float(np.mean(valid_rates)) if valid_rates else None,
        "family_means": means,
    }
