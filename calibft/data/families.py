"""The 30 distribution families of the benchmark, as a table of data.

Each row gives the prompt's display name and parameter order, the SciPy distribution and its keyword
arguments (`Family.law` freezes them), the support used for validity, and whether the family is
integer-valued or held out of training (docs/method.md, Distribution families).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from calibft.core.cpu import warn_if_numpy_runs_avx512_kernels

if TYPE_CHECKING:
    from scipy import stats

Params = Mapping[str, float]
INF = math.inf


@dataclass(frozen=True)
class Family:
    id: str
    display: str
    tier: int
    params: tuple[str, ...]
    scipy_name: str
    scipy_params: Callable[[Params], dict[str, float]]  # keyword arguments of the SciPy distribution
    support: Callable[[Params], tuple[float, float]]
    integer: bool = False
    held_out: bool = False

    @property
    def distribution(self) -> stats.rv_continuous | stats.rv_discrete:
        """The SciPy distribution, not frozen. scipy.stats is imported here, not with the module: the workflow's
        planner reads the table in every job and takes a second to import it."""
        from scipy import stats

        return getattr(stats, self.scipy_name)

    def law(self, params: Params):
        """The frozen SciPy law of a prompt's parameters."""
        warn_if_numpy_runs_avx512_kernels()
        return self.distribution(**self.scipy_params(params))

    def unfrozen_law(self, params: Params) -> UnfrozenLaw:
        """The law's ppf, cdf, pmf and median without freezing it. Code that builds many laws (the output
        spaces, the tiny model's answers) calls this: freezing constructs a distribution object, about 0.7 ms."""
        warn_if_numpy_runs_avx512_kernels()
        return UnfrozenLaw(self.distribution, self.scipy_params(params))


@dataclass(frozen=True)
class UnfrozenLaw:
    """A SciPy distribution and its keyword arguments, called as a frozen law would call them."""

    distribution: stats.rv_continuous | stats.rv_discrete
    params: dict[str, float]

    def ppf(self, q):
        return self.distribution.ppf(q, **self.params)

    def cdf(self, x):
        return self.distribution.cdf(x, **self.params)

    def pmf(self, k):
        return self.distribution.pmf(k, **self.params)

    def median(self):
        return self.distribution.median(**self.params)


def _real(p: Params) -> tuple[float, float]:
    return (-INF, INF)


def _positive(p: Params) -> tuple[float, float]:
    return (0.0, INF)


def _unit(p: Params) -> tuple[float, float]:
    return (0.0, 1.0)


def _hypergeom_support(p: Params) -> tuple[float, float]:
    M, K, N = p["M"], p["K"], p["N"]
    return (max(0.0, N - (M - K)), min(N, K))


# fmt: off
_ROWS = [
    Family("uniform", "Uniform", 1, ("a", "b"), "uniform",
           lambda p: {"loc": p["a"], "scale": p["b"] - p["a"]}, lambda p: (p["a"], p["b"])),
    Family("gaussian", "Gaussian", 1, ("mu", "sigma"), "norm",
           lambda p: {"loc": p["mu"], "scale": p["sigma"]}, _real),
    Family("bernoulli", "Bernoulli", 1, ("p",), "bernoulli",
           lambda p: {"p": p["p"]}, _unit, integer=True, held_out=True),
    Family("beta", "Beta", 2, ("alpha", "beta"), "beta",
           lambda p: {"a": p["alpha"], "b": p["beta"]}, _unit),
    Family("binomial", "Binomial", 2, ("n", "p"), "binom",
           lambda p: {"n": int(p["n"]), "p": p["p"]}, lambda p: (0.0, p["n"]), integer=True),
    Family("poisson", "Poisson", 2, ("lambda",), "poisson",
           lambda p: {"mu": p["lambda"]}, _positive, integer=True, held_out=True),
    Family("exponential", "Exponential", 2, ("lambda",), "expon",
           lambda p: {"scale": 1.0 / p["lambda"]}, _positive),
    Family("geometric", "Geometric", 2, ("p",), "geom",
           lambda p: {"p": p["p"]}, lambda p: (1.0, INF), integer=True),
    Family("negative_binomial", "Negative Binomial", 2, ("r", "p"), "nbinom",
           lambda p: {"n": int(p["r"]), "p": p["p"]}, _positive, integer=True),
    Family("lognormal", "LogNormal", 2, ("mu", "sigma"), "lognorm",
           lambda p: {"s": p["sigma"], "scale": math.exp(p["mu"])}, _positive),
    Family("triangular", "Triangular", 2, ("a", "c", "b"), "triang",
           lambda p: {"c": (p["c"] - p["a"]) / (p["b"] - p["a"]), "loc": p["a"], "scale": p["b"] - p["a"]},
           lambda p: (p["a"], p["b"])),
    Family("rayleigh", "Rayleigh", 2, ("sigma",), "rayleigh",
           lambda p: {"scale": p["sigma"]}, _positive),
    Family("maxwell", "Maxwell", 2, ("scale",), "maxwell",
           lambda p: {"scale": p["scale"]}, _positive, held_out=True),
    Family("truncnorm", "TruncNorm", 2, ("mu", "sigma", "lower", "upper"), "truncnorm",
           lambda p: {"a": (p["lower"] - p["mu"]) / p["sigma"], "b": (p["upper"] - p["mu"]) / p["sigma"],
                      "loc": p["mu"], "scale": p["sigma"]},
           lambda p: (p["lower"], p["upper"]), held_out=True),
    Family("cauchy", "Cauchy", 3, ("x0", "gamma"), "cauchy",
           lambda p: {"loc": p["x0"], "scale": p["gamma"]}, _real),
    Family("student_t", "Student's t", 3, ("nu",), "t",
           lambda p: {"df": p["nu"]}, _real),
    Family("chi_square", "Chi-Square", 3, ("nu",), "chi2",
           lambda p: {"df": p["nu"]}, _positive),
    Family("f_distribution", "F-Distribution", 3, ("d1", "d2"), "f",
           lambda p: {"dfn": p["d1"], "dfd": p["d2"]}, _positive),
    Family("gamma", "Gamma", 3, ("alpha", "beta"), "gamma",
           lambda p: {"a": p["alpha"], "scale": p["beta"]}, _positive),
    Family("weibull", "Weibull", 3, ("k", "lambda"), "weibull_min",
           lambda p: {"c": p["k"], "scale": p["lambda"]}, _positive, held_out=True),
    Family("laplace", "Laplace", 3, ("mu", "b"), "laplace",
           lambda p: {"loc": p["mu"], "scale": p["b"]}, _real),
    Family("logistic", "Logistic", 3, ("mu", "s"), "logistic",
           lambda p: {"loc": p["mu"], "scale": p["s"]}, _real),
    Family("pareto", "Pareto", 3, ("alpha", "xm"), "pareto",
           lambda p: {"b": p["alpha"], "scale": p["xm"]}, lambda p: (p["xm"], INF)),
    Family("hypergeometric", "Hypergeometric", 3, ("M", "K", "N"), "hypergeom",
           lambda p: {"M": p["M"], "n": p["K"], "N": p["N"]}, _hypergeom_support, integer=True),
    Family("gumbel", "Gumbel", 3, ("mu", "beta"), "gumbel_r",
           lambda p: {"loc": p["mu"], "scale": p["beta"]}, _real),
    Family("skellam", "Skellam", 3, ("mu1", "mu2"), "skellam",
           lambda p: {"mu1": p["mu1"], "mu2": p["mu2"]}, _real, integer=True),
    Family("beta_binomial", "Beta-Binomial", 3, ("n", "alpha", "beta"), "betabinom",
           lambda p: {"n": int(p["n"]), "a": p["alpha"], "b": p["beta"]}, lambda p: (0.0, p["n"]), integer=True),
    Family("lomax", "Lomax", 3, ("alpha", "lambda"), "lomax",
           lambda p: {"c": p["alpha"], "scale": p["lambda"]}, _positive),
    Family("inverse_gaussian", "Inverse Gaussian", 3, ("mu", "lambda"), "invgauss",
           lambda p: {"mu": p["mu"] / p["lambda"], "scale": p["lambda"]}, _positive),
    Family("chi", "Chi", 3, ("df",), "chi",
           lambda p: {"df": p["df"]}, _positive, held_out=True),
]
# fmt: on

FAMILIES: dict[str, Family] = {family.id: family for family in _ROWS}


def family(family_id: str) -> Family:
    """The family with this id; a KeyError that lists the known ids otherwise."""
    try:
        return FAMILIES[family_id]
    except KeyError:
        raise KeyError(f"unknown family {family_id!r}; known: {', '.join(FAMILIES)}") from None
