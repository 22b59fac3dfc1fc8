import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibft.data.families import FAMILIES
from calibft.data.grid import prompts
from calibft.data.output_space import (
    SpaceSet,
    build_output_space,
    check_space_settings,
    format_grid,
    spaces_for_prompts,
)
from tests.reference import reference_space

AUTHORS = json.loads((Path(__file__).parent / "fixtures" / "authors_artifact.json").read_text())
SPLITS = {split: prompts(split) for split in ("train", "unseen", "ood")}
EVAL = SPLITS["unseen"] + SPLITS["ood"]


@pytest.mark.parametrize(
    "split,bins",
    [("train", 1001), ("train", 16384), ("unseen", 16384), ("ood", 16384)],
)
def test_identical_to_the_authors_artifact(split, bins):
    """Strings exactly and masses to 1e-9, against spaces produced by the authors' own code."""
    expected = AUTHORS["spaces"][f"{split}_d5_b{bins}"]
    chosen = [SPLITS[split][i] for i in expected["indices"]]
    spaces = spaces_for_prompts(chosen, 5, bins)
    assert [len(s.probs) for s in spaces] == expected["sizes"]
    joined = "\n".join(",".join(s.strings()) for s in spaces)
    assert hashlib.sha256(joined.encode()).hexdigest() == expected["values_sha256"]
    by_index = dict(zip(expected["indices"], spaces, strict=True))
    for index, probes in expected["probe_probs"].items():
        positions, probs = np.array(probes).T
        np.testing.assert_allclose(by_index[int(index)].probs[positions.astype(int)], probs, rtol=0, atol=1e-9)


SAMPLE = SPLITS["train"][::61] + EVAL[::3]


@pytest.mark.parametrize("decimals,bins", [(5, 1001), (5, 16384), (2, 50), (0, 7), (3, 4096)])
@pytest.mark.parametrize("p", SAMPLE, ids=lambda p: p.id)
def test_matches_the_plain_full_grid_reference(p, decimals, bins):
    strings, probs = reference_space(p.family, p.params, decimals, bins)
    space = build_output_space(p.family, p.params, decimals, bins)
    assert space.strings() == strings
    np.testing.assert_allclose(space.probs, probs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("split", ["train", "unseen", "ood"])
def test_properties_on_every_prompt(split):
    for p, space in zip(SPLITS[split], spaces_for_prompts(SPLITS[split], 5, 1001), strict=True):
        numbers = np.array(space.strings(), dtype=float)
        assert 1 <= len(space.probs) <= 1001, p.id
        assert (space.probs >= 0).all() and abs(space.probs.sum() - 1) < 1e-12, p.id
        assert (np.diff(numbers) > 0).all(), p.id  # unique, in increasing numeric order
        lo, hi = FAMILIES[p.family].support(p.params)
        assert lo <= numbers[0] and numbers[-1] <= hi, p.id


def test_integer_masses_are_scipy_pmf():
    p = next(p for p in SPLITS["train"] if p.family == "binomial")  # finite support: plain pmf
    space = build_output_space(p.family, p.params, 5, 1001)
    law = FAMILIES["binomial"].law(p.params)
    np.testing.assert_allclose(space.probs, law.pmf(np.arange(int(p.params["n"]) + 1)), atol=1e-15)
    poisson = build_output_space("poisson", {"lambda": 4.0}, 5, 1001)  # unbounded: tail folded into the last
    law = FAMILIES["poisson"].law({"lambda": 4.0})
    last = len(poisson.probs) - 1
    assert last == law.ppf(0.999)
    np.testing.assert_allclose(poisson.probs[:-1], law.pmf(np.arange(last)), atol=1e-15)
    np.testing.assert_allclose(poisson.probs[-1], law.sf(last - 1), atol=1e-15)


def test_continuous_bins_carry_scipy_cdf_mass():
    """Uniform(a, b): quantile-trimmed interval, tails in the edge bins, CDF differences between midpoints."""
    space = build_output_space("uniform", {"a": -5.0, "b": -4.0}, 5, 1001)
    assert space.strings()[:2] == ["-4.99899", "-4.99800"]  # float error shifts the first grid point
    values = np.array(space.strings(), dtype=float)
    mids = (values[:-1] + values[1:]) / 2
    expected = np.diff(np.concatenate(([-5.0], mids, [-4.0])))
    np.testing.assert_allclose(space.probs, expected, atol=1e-12)


def test_degenerate_grid_puts_all_mass_on_the_midpoint():
    space = build_output_space("beta", {"alpha": 7.0, "beta": 7.0}, 0, 10)
    assert space.strings() == ["0"] and space.probs.tolist() == [1.0]


def test_format_grid_equals_fstring_of_the_float():
    rng = np.random.default_rng(0)
    for decimals in range(9):
        ks = np.concatenate([rng.integers(-(10 ** (decimals + 3)), 10 ** (decimals + 3), 5000), np.arange(-12, 13)])
        expected = [f"{v:.{decimals}f}" for v in (ks * 10**-decimals).tolist()]
        assert [s.decode() for s in format_grid(ks, decimals).tolist()] == expected


@pytest.mark.parametrize("decimals,bins", [(-1, 10), (9, 10), (2, 1), (2.5, 10)])
def test_bad_settings_are_refused(decimals, bins):
    with pytest.raises(ValueError, match=r"decimals|max_bins"):
        check_space_settings(decimals, bins)


def test_space_set_round_trip_and_parallel_build(tmp_path):
    chosen = SPLITS["train"][:150]
    serial = spaces_for_prompts(chosen, 5, 1001)
    parallel = spaces_for_prompts(chosen, 5, 1001, threads=2)
    spaces = SpaceSet.from_spaces([p.id for p in chosen], parallel, decimals=5, max_bins=1001)
    spaces.save(tmp_path / "s.npz")
    loaded = SpaceSet.load(tmp_path / "s.npz")
    assert loaded.metadata == {"decimals": 5, "max_bins": 1001}
    assert list(loaded.ids) == [p.id for p in chosen]
    for i, space in enumerate(serial):
        assert loaded.space(i).strings() == space.strings()
        np.testing.assert_array_equal(loaded.space(i).probs, space.probs)


def test_a_trie_job_imports_neither_scipy_nor_the_families():
    """Loading spaces and building tries must not pay scipy.stats' second of imports (four trie jobs per tokenizer)."""
    script = (
        "import sys; import calibft.data.output_space, calibft.data.trie, calibft.lm.models; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy' or m == 'calibft.data.families'))"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
