"""The data layer gives the same bits on every x86-64 CPU: run natively and as a CPU without AVX-512 (emulated
with calibft.core.cpu.AVX2_FEATURE_SET, through `calibft cpu --as-avx2`), each in a fresh interpreter, since the
kernels are picked at import."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy._core._multiarray_umath import __cpu_features__

import calibft.core.cpu
from calibft.core.cpu import NUMPY_PIN, pin_numpy_kernels, warn_if_numpy_runs_avx512_kernels
from calibft.data import grid
from calibft.data.families import family
from tests.test_grid import AUTHORS, texts_digest

REPO = Path(__file__).resolve().parents[1]
CALIBFT = str(Path(sys.executable).parent / "calibft")
HAS_AVX512 = bool(__cpu_features__.get("AVX512F"))  # the hardware's, whatever numpy dispatches to


def data_layer_digest(*launcher: str, environment: dict[str, str] | None = None) -> dict:
    """tests/data_layer_digest.py in a fresh interpreter, started through `launcher`, with these variables
    added to the environment."""
    result = subprocess.run(
        [*launcher, sys.executable, str(REPO / "tests" / "data_layer_digest.py")],
        env={**os.environ, **(environment or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def native() -> dict:
    return data_layer_digest()


@pytest.fixture(scope="module")
def avx2() -> dict:
    """As a user emulates a CPU without AVX-512: `calibft cpu --as-avx2 COMMAND`."""
    return data_layer_digest(CALIBFT, "cpu", "--as-avx2")


def artifacts(digest: dict) -> dict:
    kinds = ("prompts", "spaces", "tries", "metrics", "tiny_model")
    return {key: value for key, value in digest.items() if key.split("/")[0] in kinds}


def test_the_avx2_feature_set_turns_off_the_avx512_kernels_of_numpy_and_torch(avx2):
    assert avx2["numpy_avx512_kernels"] == []
    assert avx2["torch_capability"] == "AVX2"


def test_calibft_runs_no_avx512_kernel_of_numpy(native):
    assert native["numpy_avx512_kernels"] == []


def test_the_data_layer_is_identical_natively_and_as_a_cpu_without_avx512(native, avx2):
    # prompts of 3 splits, the tiny model's answers; 3 spaces' values, probs, tries, masses, draws; 2 metrics
    assert len(artifacts(native)) == 4 + 3 * 5 + 2
    assert artifacts(native) == artifacts(avx2)


@pytest.mark.parametrize("split", ["train", "unseen", "ood"])
def test_prompts_are_the_authors_as_a_cpu_without_avx512(avx2, split):
    assert avx2[f"prompts/{split}"] == AUTHORS["prompts"][split]["sha256"]


def test_calibft_prompts_train_as_a_cpu_without_avx512_prints_the_authors_prompts():
    command = [CALIBFT, "cpu", "--as-avx2", CALIBFT, "prompts", "train"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    texts = [json.loads(line)["prompt"] for line in result.stdout.splitlines()]
    assert texts_digest(texts) == AUTHORS["prompts"]["train"]["sha256"]


def test_numpy_geomspace_as_a_cpu_without_avx512_changes_the_prompts_of_the_values_it_misses(avx2, monkeypatch):
    """Why the grid's geometric axes are written out (grid.GEOMSPACE): numpy.geomspace gives the authors' values
    only up to their last bits, and a prompt prints its parameters to the last digit, so each value it misses
    changes every training prompt on it, and the prompts are no longer the authors'.

    Which values it misses turns on the kernels and the C library that compute it: on the CPU this was written on,
    as a CPU without AVX-512, 4 values in 51 training prompts (lambda=1.7403502942142053 where the authors print
    1.740350294214205). A hard-coded list or count would flip with them, so the test derives the count of changed
    prompts from the values missed here, through the product of each family's axes, and holds to that."""
    computed = {key: avx2["geomspace"][repr(key)] for key in grid.GEOMSPACE}
    missed = {
        key: {i for i, value in enumerate(values) if value != computed[key][i]}
        for key, values in grid.GEOMSPACE.items()
    }
    for key, values in grid.GEOMSPACE.items():  # the same sequence, up to a few units in the last place
        np.testing.assert_allclose(computed[key], values, rtol=8 * np.finfo(float).eps, atol=0, err_msg=repr(key))

    by_values = {values: key for key, values in grid.GEOMSPACE.items()}
    changed = 0  # the training points with at least one missed value: all of a family's but those with none
    for axes, _ in grid.TRAIN_AXES.values():
        kept = [len(values) - len(missed.get(by_values.get(tuple(values)), ())) for _, values in axes]
        changed += math.prod(len(values) for _, values in axes) - math.prod(kept)

    literal_axes = {values: computed[key] for key, values in grid.GEOMSPACE.items()}
    computed_axes = {
        family: ([(name, literal_axes.get(tuple(values), values)) for name, values in axes], derive)
        for family, (axes, derive) in grid.TRAIN_AXES.items()
    }
    authors = grid.prompts("train")
    monkeypatch.setattr(grid, "TRAIN_AXES", computed_axes)
    computed_prompts = grid.prompts("train")
    assert sum(a.prompt != c.prompt for a, c in zip(authors, computed_prompts, strict=True)) == changed
    is_authors = texts_digest([p.prompt for p in computed_prompts]) == AUTHORS["prompts"]["train"]["sha256"]
    assert is_authors == (changed == 0)


@pytest.mark.skipif(not HAS_AVX512, reason="this CPU has no AVX-512 kernels to compare with")
def test_numpy_avx512_kernels_would_change_the_probabilities(avx2):
    """Why calibft turns them off: with them (NPY_DISABLE_CPU_FEATURES set empty), the masses of the output
    spaces and tries and the metrics (W1 evaluates the law's CDF) differ in their last bits; the strings do not."""
    unpinned = data_layer_digest(environment={"NPY_DISABLE_CPU_FEATURES": ""})
    assert unpinned["numpy_avx512_kernels"] != []
    changed = {key for key, value in artifacts(unpinned).items() if value != avx2[key]}
    assert {key for key in changed if key.endswith("/probs")} == {key for key in avx2 if key.endswith("/probs")}
    assert not any(key.endswith("/values") for key in changed)
    assert {"metrics/unseen", "metrics/ood"} <= changed


def test_pinning_keeps_a_setting_the_user_made(monkeypatch):
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "")
    pin_numpy_kernels()
    assert os.environ["NPY_DISABLE_CPU_FEATURES"] == ""


def test_pinning_sets_the_variable_for_child_processes(monkeypatch):
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.setattr(calibft.core.cpu, "is_x86_64", lambda: True)
    pin_numpy_kernels()
    assert os.environ["NPY_DISABLE_CPU_FEATURES"] == NUMPY_PIN["NPY_DISABLE_CPU_FEATURES"]


def test_evaluating_a_law_warns_once_where_numpy_runs_avx512_kernels(monkeypatch):
    monkeypatch.setattr(calibft.core.cpu, "numpy_avx512_kernels", lambda: ["X86_V4"])
    warn_if_numpy_runs_avx512_kernels.cache_clear()
    try:
        with pytest.warns(UserWarning, match=r"numpy runs its AVX-512 kernels \(X86_V4\)") as caught:
            family("gaussian").law({"mu": 0.0, "sigma": 1.0})
            family("gamma").unfrozen_law({"alpha": 2.0, "beta": 1.0})
        assert len(caught) == 1
    finally:
        warn_if_numpy_runs_avx512_kernels.cache_clear()


def test_pinning_leaves_other_architectures_alone(monkeypatch):
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.setattr(calibft.core.cpu, "is_x86_64", lambda: False)
    pin_numpy_kernels()
    assert "NPY_DISABLE_CPU_FEATURES" not in os.environ
