import numpy as np
import pytest
from scipy import stats

from calibft.data.families import FAMILIES, family
from calibft.data.grid import prompts

ALL_PROMPTS = [p for split in ("train", "unseen", "ood") for p in prompts(split)]


def test_registry_matches_the_paper_table():
    assert len(FAMILIES) == 30
    tiers = {t: sorted(f.id for f in FAMILIES.values() if f.tier == t) for t in (1, 2, 3)}
    assert tiers[1] == ["bernoulli", "gaussian", "uniform"]
    assert len(tiers[2]) == 11 and len(tiers[3]) == 16
    assert sorted(f.id for f in FAMILIES.values() if f.held_out) == [
        "bernoulli",
        "chi",
        "maxwell",
        "poisson",
        "truncnorm",
        "weibull",
    ]
    assert sorted(f.id for f in FAMILIES.values() if f.integer) == [
        "bernoulli", "beta_binomial", "binomial", "geometric", "hypergeometric",
        "negative_binomial", "poisson", "skellam",
    ]  # fmt: skip


@pytest.mark.parametrize("fam", FAMILIES.values(), ids=lambda f: f.id)
def test_law_is_the_named_scipy_distribution(fam):
    p = next(p for p in ALL_PROMPTS if p.family == fam.id)
    law = fam.law(p.params)
    assert law.dist.name == fam.scipy_name
    assert isinstance(law.dist, stats.rv_discrete) == fam.integer


@pytest.mark.parametrize("p", ALL_PROMPTS[::7] + ALL_PROMPTS[-42:], ids=lambda p: p.id)
def test_support_is_scipys(p):
    fam = FAMILIES[p.family]
    assert np.allclose(fam.support(p.params), fam.law(p.params).support(), rtol=1e-12, atol=1e-12)


def test_unknown_family_names_the_known_ones():
    with pytest.raises(KeyError, match="known: uniform, gaussian"):
        family("zipf")
