"""The 30 distribution families of the benchmark, as a table of data.

Each row gives the prompt's display name and parameter order, the frozen SciPy law, the support used
for validity, and whether the family is integer-valued or held out of training (REFERENCE section 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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
    law: Callable[[Params], stats.rv_continuous | stats.rv_discrete]
    support: Callable[[Params], tuple[float, float]]
    integer: bool = False
    held_out: bool = False


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
           lambda p: stats.uniform(loc=p["a"], scale=p["b"] - p["a"]), lambda p: (p["a"], p["b"])),
    Family("gaussian", "Gaussian", 1, ("mu", "sigma"), "norm",
           lambda p: stats.norm(p["mu"], p["sigma"]), _real),
    Family("bernoulli", "Bernoulli", 1, ("p",), "bernoulli",
           lambda p: stats.bernoulli(p["p"]), _unit, integer=True, held_out=True),
    Family("beta", "Beta", 2, ("alpha", "beta"), "beta",
           lambda p: stats.beta(p["alpha"], p["beta"]), _unit),
    Family("binomial", "Binomial", 2, ("n", "p"), "binom",
           lambda p: stats.binom(int(p["n"]), p["p"]), lambda p: (0.0, p["n"]), integer=True),
    Family("poisson", "Poisson", 2, ("lambda",), "poisson",
           lambda p: stats.poisson(p["lambda"]), _positive, integer=True, held_out=True),
    Family("exponential", "Exponential", 2, ("lambda",), "expon",
           lambda p: stats.expon(scale=1.0 / p["lambda"]), _positive),
    Family("geometric", "Geometric", 2, ("p",), "geom",
           lambda p: stats.geom(p["p"]), lambda p: (1.0, INF), integer=True),
    Family("negative_binomial", "Negative Binomial", 2, ("r", "p"), "nbinom",
           lambda p: stats.nbinom(int(p["r"]), p["p"]), _positive, integer=True),
    Family("lognormal", "LogNormal", 2, ("mu", "sigma"), "lognorm",
           lambda p: stats.lognorm(s=p["sigma"], scale=math.exp(p["mu"])), _positive),
    Family("triangular", "Triangular", 2, ("a", "c", "b"), "triang",
           lambda p: stats.triang(c=(p["c"] - p["a"]) / (p["b"] - p["a"]), loc=p["a"], scale=p["b"] - p["a"]),
           lambda p: (p["a"], p["b"])),
    Family("rayleigh", "Rayleigh", 2, ("sigma",), "rayleigh",
           lambda p: stats.rayleigh(scale=p["sigma"]), _positive),
    Family("maxwell", "Maxwell", 2, ("scale",), "maxwell",
           lambda p: stats.maxwell(scale=p["scale"]), _positive, held_out=True),
    Family("truncnorm", "TruncNorm", 2, ("mu", "sigma", "lower", "upper"), "truncnorm",
           lambda p: stats.truncnorm((p["lower"] - p["mu"]) / p["sigma"], (p["upper"] - p["mu"]) / p["sigma"],
                                     loc=p["mu"], scale=p["sigma"]),
           lambda p: (p["lower"], p["upper"]), held_out=True),
    Family("cauchy", "Cauchy", 3, ("x0", "gamma"), "cauchy",
           lambda p: stats.cauchy(p["x0"], p["gamma"]), _real),
    Family("student_t", "Student's t", 3, ("nu",), "t",
           lambda p: stats.t(df=p["nu"]), _real),
    Family("chi_square", "Chi-Square", 3, ("nu",), "chi2",
           lambda p: stats.chi2(df=p["nu"]), _positive),
    Family("f_distribution", "F-Distribution", 3, ("d1", "d2"), "f",
           lambda p: stats.f(p["d1"], p["d2"]), _positive),
    Family("gamma", "Gamma", 3, ("alpha", "beta"), "gamma",
           lambda p: stats.gamma(a=p["alpha"], scale=p["beta"]), _positive),
    Family("weibull", "Weibull", 3, ("k", "lambda"), "weibull_min",
           lambda p: stats.weibull_min(c=p["k"], scale=p["lambda"]), _positive, held_out=True),
    Family("laplace", "Laplace", 3, ("mu", "b"), "laplace",
           lambda p: stats.laplace(p["mu"], p["b"]), _real),
    Family("logistic", "Logistic", 3, ("mu", "s"), "logistic",
           lambda p: stats.logistic(p["mu"], p["s"]), _real),
    Family("pareto", "Pareto", 3, ("alpha", "xm"), "pareto",
           lambda p: stats.pareto(b=p["alpha"], scale=p["xm"]), lambda p: (p["xm"], INF)),
    Family("hypergeometric", "Hypergeometric", 3, ("M", "K", "N"), "hypergeom",
           lambda p: stats.hypergeom(M=p["M"], n=p["K"], N=p["N"]), _hypergeom_support, integer=True),
    Family("gumbel", "Gumbel", 3, ("mu", "beta"), "gumbel_r",
           lambda p: stats.gumbel_r(p["mu"], p["beta"]), _real),
    Family("skellam", "Skellam", 3, ("mu1", "mu2"), "skellam",
           lambda p: stats.skellam(p["mu1"], p["mu2"]), _real, integer=True),
    Family("beta_binomial", "Beta-Binomial", 3, ("n", "alpha", "beta"), "betabinom",
           lambda p: stats.betabinom(int(p["n"]), p["alpha"], p["beta"]), lambda p: (0.0, p["n"]), integer=True),
    Family("lomax", "Lomax", 3, ("alpha", "lambda"), "lomax",
           lambda p: stats.lomax(c=p["alpha"], scale=p["lambda"]), _positive),
    Family("inverse_gaussian", "Inverse Gaussian", 3, ("mu", "lambda"), "invgauss",
           lambda p: stats.invgauss(mu=p["mu"] / p["lambda"], scale=p["lambda"]), _positive),
    Family("chi", "Chi", 3, ("df",), "chi",
           lambda p: stats.chi(p["df"]), _positive, held_out=True),
]
# fmt: on

FAMILIES: dict[str, Family] = {family.id: family for family in _ROWS}


def family(family_id: str) -> Family:
    """The family with this id; a KeyError that lists the known ids otherwise."""
    try:
        return FAMILIES[family_id]
    except KeyError:
        raise KeyError(f"unknown family {family_id!r}; known: {', '.join(FAMILIES)}") from None
