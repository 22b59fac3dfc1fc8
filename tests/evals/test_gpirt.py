import codecs
import copy
import dataclasses
import functools
import hashlib
import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from scipy.optimize import approx_fprime, minimize

from calibft import cli
from calibft.cli import main
from calibft.evals.tinybench import gpirt
from calibft.pipeline.assets import TINYBENCHMARKS_PARAMS, git_blob_id
from tests.pickles import assert_plain_pickle_runs_it, touching_pickle

LB_TASKS = ["truthfulqa", "gsm8k", "winogrande", "arc", "hellaswag"]


@pytest.fixture(scope="module")
def params() -> dict:
    return gpirt.synthetic_params(seed=7)


def scores_for(task: str, seed: int = 0) -> list[float]:
    """Continuous scores with a few exact 0s and 1s, as mc2 / partial scoring give."""
    rng = np.random.default_rng([seed, list(gpirt.PARAMS_ENTRIES).index(task)])
    y = rng.uniform(size=100)
    y[rng.choice(100, 30, replace=False)] = rng.integers(0, 2, 30)
    return y.tolist()


# An independent plain-Python reading of the formulas, in the upstream style (global item indices, loops).


def ref_probability(entry: dict, i: int, theta: list[float]) -> float:
    A, B = entry["irt_parameters"]["A"], entry["irt_parameters"]["B"]
    z = 0.0
    for d in range(len(theta)):
        z += min(max(float(A[0][d][i]) * theta[d] - float(B[0][0][i]), -30.0), 30.0)
    return 1.0 / (1.0 + math.exp(-z))


def ref_seen(entry: dict, scenario: str) -> list[int]:
    k = list(entry["scenarios_position"]).index(scenario)
    return [int(j) for j in entry["seen_examples"][100 * k : 100 * k + 100]]


def ref_nll(entry: dict, seen: list[int], scores: list[float], theta) -> float:
    total = 0.0
    for j, y in zip(seen, scores, strict=True):
        p = ref_probability(entry, j, list(theta))
        total -= y * math.log(p + 1e-10) + (1.0 - y) * math.log(1.0 - p + 1e-10)
    return total


def ref_theta(entry: dict, seen: list[int], scores: list[float]) -> list[float]:
    """Nelder-Mead on the loop likelihood: another optimizer than the module's BFGS."""
    dim = len(entry["irt_parameters"]["A"][0])
    options = {"xatol": 1e-9, "fatol": 1e-12, "maxiter": 40000, "maxfev": 40000}
    result = minimize(lambda t: ref_nll(entry, seen, scores, t), np.zeros(dim), method="Nelder-Mead", options=options)
    return [float(v) for v in result.x]


def ref_balance(entry: dict, scenario: str) -> dict[int, float]:
    n_scenario = len(entry["scenarios_position"][scenario])
    subs = entry["subscenarios_position"][scenario]
    weights = {int(i): 1.0 for i in entry["scenarios_position"][scenario]}
    for positions in subs.values():
        for i in positions:
            weights[int(i)] = n_scenario / (len(subs) * len(positions))
    return weights


def ref_estimate(params: dict, task: str, scores: list[float], theta: list[float]) -> dict[str, float]:
    entry_name, scenario = {"mmlu": ("mmlu", "mmlu")}.get(task, ("lb", task))
    entry = params[entry_name]
    seen = ref_seen(entry, scenario)
    bw = ref_balance(entry, scenario)
    positions = [int(i) for i in entry["scenarios_position"][scenario]]
    unseen = [i for i in positions if i not in seen]
    weights = entry["examples_weights"][scenario]
    irt = sum(float(weights[n]) * scores[n] for n in range(100))
    seen_part = sum(bw[j] * y for j, y in zip(seen, scores, strict=True)) / len(seen)
    unseen_part = sum(bw[i] * ref_probability(entry, i, theta) for i in unseen) / len(unseen)
    l = 100 / len(positions)
    pirt = l * seen_part + (1 - l) * unseen_part
    lam = entry["optimal_lambdas"][scenario]
    return {"irt": irt, "pirt": pirt, "gpirt": lam * irt + (1 - lam) * pirt}


@pytest.mark.parametrize("task", list(gpirt.PARAMS_ENTRIES))
def test_estimate_matches_the_loop_formulas(params, task):
    scores = scores_for(task)
    entry_name, scenario = {"mmlu": ("mmlu", "mmlu")}.get(task, ("lb", task))
    entry = params[entry_name]
    theta = ref_theta(entry, ref_seen(entry, scenario), scores)
    expected = ref_estimate(params, task, scores, theta)
    got = gpirt.estimate(params, task, scores)
    assert set(got) == {"irt", "pirt", "gpirt"} and all(type(v) is float for v in got.values())
    assert got["irt"] == pytest.approx(expected["irt"], abs=1e-12)
    assert got["pirt"] == pytest.approx(expected["pirt"], abs=1e-5)
    assert got["gpirt"] == pytest.approx(expected["gpirt"], abs=1e-5)


# tinyBenchmarks' own `evaluate` (the version the release vendors) on synthetic files, recorded by
# tests/fixtures/gpirt_tinybenchmarks/make_fixture.py with numpy's AVX-512 kernels off ("pinned", as calibft runs
# numpy) and on ("avx512"): its estimates, and the ability its BFGS stopped at with its negative log-likelihood
# there. BFGS takes its gradient by finite differences, which magnify a last-bit difference in the objective (numpy's
# AVX-512 exp, OpenBLAS's kernels for BFGS's own dot products), so where it stops differs between CPUs: by up to
# 4e-4 in p-IRT between two of them, where the likelihood is flat. The comparison therefore takes what is well
# conditioned (`check_against_upstream`), on any CPU:
# - irt, a weighted sum of the scores, to 1e-12;
# - the objective at upstream's ability, to 1e-12 relative: 100 nonnegative terms of an exp and two logs each, so
#   a few units of 2^-53 apart under any kernels;
# - p-IRT and gp-IRT at upstream's ability (our fit replaced by it), to 1e-12: weighted means of probabilities;
# - the fit: our ability's negative log-likelihood within FIT_EXCESS of the minimum (found by Newton's method
#   here), as upstream's is; and p-IRT within what those two excesses allow: where the likelihood is near its
#   minimum f*, an ability whose excess is e lies within sqrt(2 e) of the minimizer in the Hessian's norm, so
#   p-IRT moves by at most sqrt(2 e * grad' H^-1 grad) from its value there (grad its gradient in the ability);
#   twice that bound, for the quadratic model's error.
# BFGS from 0 stopped with excesses up to 2.6e-3 nats over 1,584 fits of these cases, each with the objective
# scaled by (1 + k 2^-52), k = -16..16 (those last-bit changes alone move where it stops); hence 1e-2.
FIT_EXCESS = 1e-2
UPSTREAM_FILE = Path(__file__).parents[1] / "fixtures" / "gpirt_tinybenchmarks" / "tinybenchmarks_estimates.json"
UPSTREAM = json.loads(UPSTREAM_FILE.read_text())
UPSTREAM_CASES = [
    pytest.param(
        f["seed"], f["dim"], f["fingerprint"], c["task"], c["scores"], c["estimates"],
        id=f"{f['seed']}-{f['dim']}d-{c['task']}-{k}",
    )
    for f in UPSTREAM["files"]
    for k, c in enumerate(f["cases"])
]  # fmt: skip


@functools.cache
def _synthetic(seed: int, dim: int) -> dict:
    return gpirt.synthetic_params(seed=seed, dim=dim)


def _fingerprint(params: dict) -> str:
    """As make_fixture.py's `fingerprint`: sha256 of the parameters as canonical JSON."""

    def plain(value):
        return value.tolist() if isinstance(value, np.ndarray) else value.item()

    return hashlib.sha256(json.dumps(params, sort_keys=True, default=plain).encode()).hexdigest()


def library_outputs(seed: int, dim: int, task: str, scores: list[float], thetas: dict[str, list[float]]) -> dict:
    """What `check_against_upstream` compares, computed by calibft alone (in this process's kernels): the estimate,
    the fitted ability, and at each upstream ability of `thetas` the objective and the estimate."""
    params = _synthetic(seed, dim)
    scenario = gpirt.scenario_data(params, task)
    A, B, y = scenario.A[:, scenario.seen], scenario.B[scenario.seen], np.asarray(scores)
    out = {"estimate": gpirt.estimate(params, task, scores), "theta": gpirt.fit_theta(A, B, y).tolist()}
    out["nll_at"], out["estimate_at"] = {}, {}
    for name, theta in thetas.items():
        out["nll_at"][name] = gpirt.negative_log_likelihood(np.array(theta), A, B, y)
        with mock.patch.object(gpirt, "fit_theta", lambda *args, theta=theta, **kwargs: np.array(theta)):
            out["estimate_at"][name] = gpirt.estimate(params, task, scores)
    return out


def _likelihood_parts(A: np.ndarray, B: np.ndarray, y: np.ndarray, theta: np.ndarray):
    """The negative log-likelihood at theta (upstream's formula: EPS inside the logs, each dimension's term
    clipped), its gradient and its Hessian (without EPS's second-order part) in theta."""
    terms = A * theta[:, None] - B[None, :]
    p = 1.0 / (1.0 + np.exp(-np.clip(terms, -30.0, 30.0).sum(axis=0)))
    value = -np.sum(y * np.log(p + 1e-10) + (1 - y) * np.log(1 - p + 1e-10))
    slope = -(y * p * (1 - p) / (p + 1e-10) - (1 - y) * p * (1 - p) / (1 - p + 1e-10))
    J = A * (np.abs(terms) < 30.0)  # a clipped term does not move with theta
    return value, J @ slope, (J * (p * (1 - p))) @ J.T


def check_against_upstream(seed, dim, task, scores, estimates, ours) -> None:
    """The comparison of `library_outputs` with upstream's recorded runs described above."""
    scenario = gpirt.scenario_data(_synthetic(seed, dim), task)
    A, B, y = scenario.A[:, scenario.seen], scenario.B[scenario.seen], np.asarray(scores)
    theta = np.array(ours["theta"])
    for _ in range(30):  # Newton's method from our ability: the minimum, to the last digits
        _, gradient, hessian = _likelihood_parts(A, B, y, theta)
        theta = theta - np.linalg.solve(hessian, gradient)
    minimum, gradient, hessian = _likelihood_parts(A, B, y, theta)
    assert np.abs(gradient).max() < 1e-9
    unseen = np.ones(scenario.size, dtype=bool)
    unseen[scenario.seen] = False
    Au, Bu, weights = scenario.A[:, unseen], scenario.B[unseen], scenario.balance_weights[unseen]
    p = 1.0 / (1.0 + np.exp(-np.clip(Au * theta[:, None] - Bu, -30.0, 30.0).sum(axis=0)))
    share = 1 - len(scenario.seen) / scenario.size  # p-IRT's weight on the unseen items' mean
    grad = share * ((Au * (np.abs(Au * theta[:, None] - Bu) < 30.0)) @ (weights * p * (1 - p))) / unseen.sum()
    reach = math.sqrt(2 * grad @ np.linalg.solve(hessian, grad))  # p-IRT per sqrt(nats) of excess
    ours_excess = _likelihood_parts(A, B, y, np.array(ours["theta"]))[0] - minimum
    assert ours_excess <= FIT_EXCESS
    for name, want in estimates.items():
        where = f"{name}: {seed}-{dim}d {task}"
        assert ours["estimate"]["irt"] == pytest.approx(want["irt"], rel=1e-12, abs=1e-12), where
        assert ours["nll_at"][name] == pytest.approx(want["nll"], rel=1e-12), where
        for key in ("pirt", "gpirt"):
            assert ours["estimate_at"][name][key] == pytest.approx(want[key], abs=1e-12), (where, key)
        their_excess = want["nll"] - minimum
        assert their_excess <= FIT_EXCESS, where
        bound = 2 * reach * (math.sqrt(max(ours_excess, 0)) + math.sqrt(max(their_excess, 0))) + 1e-12
        assert abs(ours["estimate"]["pirt"] - want["pirt"]) <= bound, where
        assert abs(ours["estimate"]["gpirt"] - want["gpirt"]) <= (1 - scenario.lam) * bound + 1e-12, where


def test_the_upstream_fixture_covers_every_task():
    for f in UPSTREAM["files"]:
        assert {c["task"] for c in f["cases"]} == set(gpirt.PARAMS_ENTRIES)
        assert all(set(c["estimates"]) == set(UPSTREAM["kernels"]) for c in f["cases"])
    assert UPSTREAM["estimator"]["path"] == "tinyBenchmarks/__init__.py" and UPSTREAM["kernels"]["pinned"] == []


@pytest.mark.parametrize(("seed", "dim", "fingerprint", "task", "scores", "estimates"), UPSTREAM_CASES)
def test_estimate_matches_tinybenchmarks(seed, dim, fingerprint, task, scores, estimates):
    params = _synthetic(seed, dim)
    # the file the fixture was recorded on; a change of synthetic_params needs the fixture made again
    assert _fingerprint(params) == fingerprint
    thetas = {name: want["theta"] for name, want in estimates.items()}
    check_against_upstream(seed, dim, task, scores, estimates, library_outputs(seed, dim, task, scores, thetas))


AVX512_CHILD = """
import json, sys
from calibft.core.cpu import numpy_avx512_kernels
from tests.evals.test_gpirt import library_outputs
cases = json.load(sys.stdin)
print(json.dumps({"kernels": numpy_avx512_kernels(), "outputs": [library_outputs(*case) for case in cases]}))
"""


def test_estimate_matches_tinybenchmarks_under_numpy_avx512_kernels():
    """The same comparison with calibft's numbers computed where numpy runs its AVX-512 kernels
    (NPY_DISABLE_CPU_FEATURES empty), whose exp rounds differently from the C library's; skipped on a CPU
    without them."""
    cases = [
        (f["seed"], f["dim"], c["task"], c["scores"], {name: want["theta"] for name, want in c["estimates"].items()})
        for f in UPSTREAM["files"]
        for c in f["cases"]
    ]
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": ""}
    child = subprocess.run(
        [sys.executable, "-c", AVX512_CHILD],
        input=json.dumps(cases), capture_output=True, text=True, env=env, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    if not out["kernels"]:
        pytest.skip("numpy runs no AVX-512 kernels on this CPU")
    estimates = [c["estimates"] for f in UPSTREAM["files"] for c in f["cases"]]
    for (seed, dim, task, scores, _), want, ours in zip(cases, estimates, out["outputs"], strict=True):
        check_against_upstream(seed, dim, task, scores, want, ours)


def test_sigmoid_is_upstreams():
    z = np.random.default_rng(0).normal(0.0, 5.0, 10_000)
    np.testing.assert_array_equal(gpirt.sigmoid(z), 1 / (1 + np.exp(-z)))  # bit for bit, not to a tolerance


@pytest.mark.parametrize("task", ["mmlu", "hellaswag"])
def test_fit_theta_agrees_with_another_optimizer(params, task):
    scores = scores_for(task, seed=3)
    scenario = gpirt.scenario_data(params, task)
    theta = gpirt.fit_theta(scenario.A[:, scenario.seen], scenario.B[scenario.seen], scores)
    entry_name, name = {"mmlu": ("mmlu", "mmlu")}.get(task, ("lb", task))
    seen = ref_seen(params[entry_name], name)
    other = ref_theta(params[entry_name], seen, scores)
    assert theta.shape == (3,)
    np.testing.assert_allclose(theta, other, atol=1e-4)
    assert ref_nll(params[entry_name], seen, scores, theta) <= ref_nll(params[entry_name], seen, scores, other) + 1e-7


def test_fit_theta_in_one_dimension_is_the_grid_minimum():
    scenario = gpirt.scenario_data(gpirt.synthetic_params(seed=2, dim=1), "arc")
    a, b = scenario.A[0, scenario.seen], scenario.B[scenario.seen]
    y = np.asarray(scores_for("arc", seed=5))

    def nll(grid: np.ndarray) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-np.clip(np.outer(grid, a) - b, -30, 30)))
        return -(y * np.log(p + 1e-10) + (1 - y) * np.log(1 - p + 1e-10)).sum(axis=1)

    coarse = np.linspace(-8.0, 8.0, 1601)  # step 0.01, then step 1e-5 around the coarse minimum
    best = coarse[np.argmin(nll(coarse))]
    assert -7.0 < best < 7.0  # an interior minimum, so the comparison means something
    fine = np.linspace(best - 0.02, best + 0.02, 4001)
    best = fine[np.argmin(nll(fine))]
    theta = gpirt.fit_theta(scenario.A[:, scenario.seen], b, y)
    assert theta.shape == (1,) and abs(theta[0] - best) < 1e-4


def test_item_probabilities_clip_each_dimension_before_summing():
    A = np.array([[10.0, 1.0], [10.0, -2.0]])
    B = np.array([0.5, 0.25])
    theta = np.array([5.0, -4.0])
    terms = [[min(max(A[d, i] * theta[d] - B[i], -30), 30) for d in range(2)] for i in range(2)]
    expected = [1 / (1 + math.exp(-sum(t))) for t in terms]
    np.testing.assert_allclose(gpirt.item_probabilities(A, B, theta), expected, rtol=1e-12)
    assert terms[0] == [30, -30]  # the first item's terms both clip: clipping the sum would give 0.5 anyway


def test_clipping_differs_from_clipping_the_sum():
    A, B, theta = np.array([[10.0], [1.0]]), np.array([0.0]), np.array([5.0, 2.0])
    assert gpirt.item_probabilities(A, B, theta)[0] == pytest.approx(1 / (1 + math.exp(-32.0)))


@pytest.mark.parametrize("task", LB_TASKS)
def test_lb_task_k_takes_the_kth_slice_of_seen_examples(params, task):
    entry = params["lb"]
    k = list(entry["scenarios_position"]).index(task)
    scenario = gpirt.scenario_data(params, task)
    positions = np.asarray(entry["scenarios_position"][task])
    np.testing.assert_array_equal(positions[scenario.seen], entry["seen_examples"][100 * k : 100 * k + 100])
    np.testing.assert_array_equal(scenario.anchor_weights, entry["examples_weights"][task])
    assert scenario.lam == entry["optimal_lambdas"][task]


def test_reordering_the_lb_scenarios_moves_their_slices(params):
    moved = copy.deepcopy(params)
    entry = moved["lb"]
    order = ["gsm8k", "truthfulqa", "winogrande", "arc", "hellaswag", "mmlu"]
    slices = {
        name: entry["seen_examples"][100 * k : 100 * k + 100] for k, name in enumerate(entry["scenarios_position"])
    }
    entry["scenarios_position"] = {name: entry["scenarios_position"][name] for name in order}
    scores = scores_for("gsm8k")
    with pytest.raises(ValueError, match="are not all items of 'gsm8k'"):  # the old slices no longer fit
        gpirt.estimate(moved, "gsm8k", scores)
    entry["seen_examples"] = [j for name in order for j in slices[name]]
    assert gpirt.estimate(moved, "gsm8k", scores) == gpirt.estimate(params, "gsm8k", scores)


def test_scores_follow_dataset_row_order(params):
    scores = scores_for("winogrande")
    forward = gpirt.estimate(params, "winogrande", scores)
    backward = gpirt.estimate(params, "winogrande", scores[::-1])
    assert forward["irt"] != pytest.approx(backward["irt"], abs=1e-6)
    assert forward["pirt"] != pytest.approx(backward["pirt"], abs=1e-6)


def test_mmlu_balance_weights_follow_unequal_subscenarios(params):
    scenario = gpirt.scenario_data(params, "mmlu")
    entry = params["mmlu"]
    expected = ref_balance(entry, "mmlu")
    positions = [int(i) for i in entry["scenarios_position"]["mmlu"]]
    np.testing.assert_allclose(scenario.balance_weights, [expected[i] for i in positions], rtol=1e-12)
    assert len(set(np.round(scenario.balance_weights, 12))) == len(entry["subscenarios_position"]["mmlu"])
    assert scenario.balance_weights.sum() == pytest.approx(len(positions))
    for task in LB_TASKS:  # one subscenario: all ones
        np.testing.assert_array_equal(gpirt.scenario_data(params, task).balance_weights, 1.0)


def test_items_outside_every_subscenario_keep_weight_one(params):
    changed = copy.deepcopy(params)
    subs = changed["mmlu"]["subscenarios_position"]["mmlu"]
    dropped = subs.pop("harness_hendrycksTest_anatomy_5")
    scenario = gpirt.scenario_data(changed, "mmlu")
    positions = list(changed["mmlu"]["scenarios_position"]["mmlu"])
    np.testing.assert_array_equal(scenario.balance_weights[[positions.index(i) for i in dropped]], 1.0)
    n = len(positions)
    for positions_of_sub in subs.values():
        local = [positions.index(i) for i in positions_of_sub]
        np.testing.assert_allclose(scenario.balance_weights[local], n / (len(subs) * len(positions_of_sub)))


def test_truthfulqa_also_resolves_under_its_harness_name(params):
    renamed = copy.deepcopy(params)
    entry = renamed["lb"]
    for key in ("scenarios_position", "subscenarios_position", "examples_weights", "optimal_lambdas"):
        entry[key] = {("harness_truthfulqa_mc_0" if k == "truthfulqa" else k): v for k, v in entry[key].items()}
    scores = scores_for("truthfulqa")
    assert gpirt.scenario_data(renamed, "truthfulqa").name == "harness_truthfulqa_mc_0"
    assert gpirt.estimate(renamed, "truthfulqa", scores) == gpirt.estimate(params, "truthfulqa", scores)
    del entry["scenarios_position"]["harness_truthfulqa_mc_0"]
    with pytest.raises(ValueError, match="task 'truthfulqa': none of the scenarios"):
        gpirt.estimate(renamed, "truthfulqa", scores)


@pytest.mark.parametrize("task", list(gpirt.PARAMS_ENTRIES))
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_constant_scores_give_finite_estimates(params, task, value):
    got = gpirt.estimate(params, task, [value] * 100)
    assert all(math.isfinite(v) for v in got.values())
    assert got["irt"] == pytest.approx(value * np.sum(gpirt.scenario_data(params, task).anchor_weights))
    assert 0.0 <= got["pirt"] <= 1.0 and 0.0 <= got["gpirt"] <= 1.0


def test_higher_scores_give_higher_estimates(params):
    low, high = gpirt.estimate(params, "mmlu", [0.2] * 100), gpirt.estimate(params, "mmlu", [0.8] * 100)
    assert all(high[key] > low[key] for key in ("irt", "pirt", "gpirt"))


@pytest.mark.parametrize(
    "scores,message",
    [
        ([0.5] * 99, "expected 100 item scores, got 99"),
        ([0.5] * 101, "expected 100 item scores, got 101"),
        ([0.5] * 99 + [1.5], r"must lie in \[0, 1\]; item 99 is 1.5"),
        ([-0.1] + [0.5] * 99, r"must lie in \[0, 1\]; item 0 is -0.1"),
        ([0.5] * 50 + [float("nan")] + [0.5] * 49, r"must lie in \[0, 1\]; item 50"),
        ([[0.5] * 100], "expected 100 item scores, got shape"),
        (["x"] * 100, "must be a list of 100 numbers"),
    ],
)
def test_invalid_scores_are_refused(params, scores, message):
    with pytest.raises(ValueError, match=message):
        gpirt.estimate(params, "arc", scores)


def test_unknown_task_is_refused(params):
    with pytest.raises(ValueError, match="unknown task 'boolq'"):
        gpirt.estimate(params, "boolq", [0.5] * 100)


def test_seen_examples_must_split_evenly_over_the_scenarios(params):
    short = copy.deepcopy(params)
    short["lb"]["seen_examples"] = short["lb"]["seen_examples"][:451]
    with pytest.raises(ValueError, match=r"has 451 indices, not the same number for each of its 6 scenarios"):
        gpirt.estimate(short, "hellaswag", [0.5] * 100)


def test_fewer_anchors_per_scenario_as_in_a_demo_file():
    small = gpirt.synthetic_params(seed=3, n_seen=5)
    assert len(small["lb"]["seen_examples"]) == 30 and len(small["mmlu"]["examples_weights"]["mmlu"]) == 5
    scenario = gpirt.scenario_data(small, "gsm8k")
    assert scenario.seen.size == 5
    scores = [1.0, 0.0, 1.0, 1.0, 0.0]
    result = gpirt.estimate(small, "gsm8k", scores)
    assert result["irt"] == pytest.approx(float(np.dot(scenario.anchor_weights, scores)))
    with pytest.raises(ValueError, match="expected 5 item scores, got 100"):
        gpirt.estimate(small, "gsm8k", [0.5] * 100)


def test_synthetic_params_are_deterministic_and_structured(tmp_path):
    a, b = gpirt.synthetic_params(seed=4), gpirt.synthetic_params(seed=4)
    assert pickle.dumps(a) == pickle.dumps(b)
    assert pickle.dumps(a) != pickle.dumps(gpirt.synthetic_params(seed=5))
    path = gpirt.write_synthetic_params(tmp_path / "sub" / "tinyBenchmarks.pkl", seed=4)
    loaded = gpirt.load_params(path)
    assert pickle.dumps(loaded) == pickle.dumps(a)
    assert list(loaded["lb"]["scenarios_position"]) == [*LB_TASKS, "mmlu"]
    assert list(loaded["mmlu"]["scenarios_position"]) == ["mmlu"]
    for entry in (loaded["lb"], loaded["mmlu"]):
        n = entry["irt_parameters"]["A"].shape[2]
        assert entry["irt_parameters"]["A"].shape == (1, 3, n) and entry["irt_parameters"]["B"].shape == (1, 1, n)
        assert len(entry["seen_examples"]) == 100 * len(entry["scenarios_position"])
        assert sorted(i for p in entry["scenarios_position"].values() for i in p) == list(range(n))
        for name, subs in entry["subscenarios_position"].items():
            assert sorted(i for p in subs.values() for i in p) == sorted(entry["scenarios_position"][name])
            assert sum(entry["examples_weights"][name]) == pytest.approx(1.0)
    sizes = [len(p) for p in loaded["mmlu"]["subscenarios_position"]["mmlu"].values()]
    assert len(sizes) > 2 and len(set(sizes)) == len(sizes)


def _pickle(path, obj):
    path.write_bytes(pickle.dumps(obj))
    return path


def test_load_params_names_missing_keys(tmp_path, params):
    no_mmlu = {"lb": params["lb"]}
    with pytest.raises(ValueError, match=r"missing or malformed keys: mmlu$"):
        gpirt.load_params(_pickle(tmp_path / "a.pkl", no_mmlu))
    broken = copy.deepcopy(params)
    del broken["lb"]["optimal_lambdas"]
    del broken["mmlu"]["irt_parameters"]["B"]
    with pytest.raises(ValueError, match=r"lb\.optimal_lambdas, mmlu\.irt_parameters\.B"):
        gpirt.load_params(_pickle(tmp_path / "b.pkl", broken))
    with pytest.raises(ValueError, match="expected a dict of benchmark entries, got list"):
        gpirt.load_params(_pickle(tmp_path / "c.pkl", [1, 2]))
    (tmp_path / "d.pkl").write_text("not a pickle")
    with pytest.raises(ValueError, match="is not a readable tinyBenchmarks parameters pickle"):
        gpirt.load_params(tmp_path / "d.pkl")
    extra = dict(params, helm_lite={}, alpaca={})  # the real file's other entries are allowed
    assert set(gpirt.load_params(_pickle(tmp_path / "e.pkl", extra))) == {"lb", "mmlu", "helm_lite", "alpaca"}


# The restricted unpickler: plain containers, numbers and numpy arrays of numbers, nothing that runs code.


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_the_parameters_load_under_every_protocol(tmp_path, params, protocol):
    path = tmp_path / "params.pkl"
    path.write_bytes(pickle.dumps(params, protocol=protocol))
    assert pickle.dumps(gpirt.load_params(path), protocol=4) == pickle.dumps(params, protocol=4)


def test_a_file_pickled_by_numpy_1_loads(tmp_path, params):
    """numpy 1 names its array functions under numpy.core, numpy 2 under numpy._core (protocol 2 writes the
    names as text, so the older ones can be put in)."""
    data = pickle.dumps(params, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in data and b"numpy._core" not in data
    path = tmp_path / "numpy1.pkl"
    path.write_bytes(data)
    assert pickle.dumps(gpirt.load_params(path), protocol=4) == pickle.dumps(params, protocol=4)


def test_a_pickle_that_would_run_a_command_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "MARKER"
    path = touching_pickle(tmp_path / "tampered.pkl", marker)
    assert_plain_pickle_runs_it(path, marker)
    with pytest.raises(ValueError, match=r"asks for posix\.system") as err:
        gpirt.load_params(path)
    assert str(path) in str(err.value) and "nothing in the file is run" in str(err.value)
    assert not marker.exists()


class Parameters:
    """A class of the test module: its instances pickle by naming it."""

    def __init__(self):
        self.lb = {}


class Rot13:
    """Unpickles by calling `codecs.encode` with another codec than the latin-1 that bytes are pickled with."""

    def __reduce__(self):
        return codecs.encode, ("secret", "rot13")


@pytest.mark.parametrize(
    ("value", "protocol", "named"),
    [
        (Parameters(), 4, r"tests\.evals\.test_gpirt\.Parameters"),
        ({"lb": {1, 2}}, 3, r"builtins\.set"),  # protocol 3 builds a set by calling it; the real file has none
        ({"lb": Rot13()}, 2, r"_codecs\.encode with encoding 'rot13'"),
    ],
)
def test_other_types_are_refused_by_name(tmp_path, value, protocol, named):
    path = tmp_path / "other.pkl"
    path.write_bytes(pickle.dumps(value, protocol=protocol))
    with pytest.raises(ValueError, match=named):
        gpirt.load_params(path)


def test_pandas_objects_are_refused(tmp_path):
    pandas = pytest.importorskip("pandas")
    path = tmp_path / "frame.pkl"
    path.write_bytes(pickle.dumps({"lb": pandas.DataFrame({"A": [1.0, 2.0]})}))
    with pytest.raises(ValueError, match=r"asks for pandas\."):
        gpirt.load_params(path)


def test_object_arrays_are_refused_even_of_plain_items(tmp_path, params):
    bad = copy.deepcopy(params)
    bad["mmlu"]["irt_parameters"]["B"] = np.array([1.0, "x"], dtype=object)
    path = _pickle(tmp_path / "objects.pkl", bad)
    with pytest.raises(ValueError, match=r"\['mmlu'\]\['irt_parameters'\]\['B'\] is a numpy array of dtype object"):
        gpirt.load_params(path)


def test_a_list_that_contains_itself_is_walked_once(tmp_path):
    loop = []
    loop.append(loop)
    path = _pickle(tmp_path / "loop.pkl", {"lb": loop, "mmlu": [np.array([1, "x"], dtype=object)]})
    with pytest.raises(ValueError, match=r"the pickle\['mmlu'\]\[0\] is a numpy array of dtype object"):
        gpirt.load_params(path)


def test_bad_irt_shapes_are_refused(params):
    bad = copy.deepcopy(params)
    bad["mmlu"]["irt_parameters"]["B"] = bad["mmlu"]["irt_parameters"]["B"][0, 0]
    with pytest.raises(ValueError, match=r"A must be \(1, D, N\) and B \(1, 1, N\)"):
        gpirt.estimate(bad, "mmlu", [0.5] * 100)


# The command line.


@pytest.fixture
def files(tmp_path, params):
    paths = {"params": _pickle(tmp_path / "tinyBenchmarks.pkl", params)}
    for task in gpirt.PARAMS_ENTRIES:
        paths[task] = tmp_path / f"{task}.json"
        paths[task].write_text(json.dumps(scores_for(task)))
    return paths


@pytest.mark.parametrize("task", ["mmlu", "truthfulqa"])
def test_cli_prints_the_estimates_as_one_json_line(capsys, files, params, task):
    code = main(["gpirt", "--own-params", str(files["params"]), "--task", task, "--scores", str(files[task])])
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and len(out.splitlines()) == 1
    assert json.loads(out) == gpirt.estimate(params, task, scores_for(task))


def test_cli_runs_as_a_module(files, params):
    args = ["gpirt", "--own-params", str(files["params"]), "--task", "gsm8k", "--scores", str(files["gsm8k"])]
    result = subprocess.run([sys.executable, "-m", "calibft.cli", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == gpirt.estimate(params, "gsm8k", scores_for("gsm8k"))


def test_cli_errors_are_one_line_and_exit_non_zero(capsys, files, tmp_path):
    def run(params_path, scores_path, task="arc"):
        code = main(["gpirt", "--own-params", str(params_path), "--task", task, "--scores", str(scores_path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("calibft: error: ")
        return err

    assert "No such file or directory" in run(tmp_path / "missing.pkl", files["arc"])
    assert "missing.pkl" in run(tmp_path / "missing.pkl", files["arc"])
    assert "missing.json" in run(files["params"], tmp_path / "missing.json")
    (tmp_path / "short.json").write_text(json.dumps([1.0] * 99))
    assert "expected 100 item scores, got 99" in run(files["params"], tmp_path / "short.json")
    (tmp_path / "dict.json").write_text(json.dumps({"scores": [1.0] * 100}))
    assert "must hold a JSON list of numbers" in run(files["params"], tmp_path / "dict.json")
    (tmp_path / "bad.json").write_text("[1.0, ")
    assert "is not valid JSON" in run(files["params"], tmp_path / "bad.json")
    _pickle(tmp_path / "broken.pkl", {"lb": {}})
    assert "lb.seen_examples" in run(tmp_path / "broken.pkl", files["arc"])


def test_cli_verifies_params_as_the_upstream_file_and_names_the_option_for_ones_own(capsys, files, monkeypatch):
    args = ["--task", "arc", "--scores", str(files["arc"])]
    assert main(["gpirt", "--params", str(files["params"]), *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert f"{files['params']} is not the upstream tinyBenchmarks.pkl" in err
    assert f"expected git blob id {TINYBENCHMARKS_PARAMS.git_blob}, got {git_blob_id(files['params'])}" in err
    assert f"--own-params {files['params']}" in err
    # A file with the pinned id is read: here, the synthetic file pinned in place of the upstream one.
    pinned = dataclasses.replace(TINYBENCHMARKS_PARAMS, git_blob=git_blob_id(files["params"]))
    monkeypatch.setattr(cli, "TINYBENCHMARKS_PARAMS", pinned)
    assert main(["gpirt", "--params", str(files["params"]), *args]) == 0
    assert "irt" in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("option", ["--params", "--own-params"])
def test_cli_refuses_a_pickle_that_would_run_a_command_and_runs_nothing(files, tmp_path, option):
    marker = tmp_path / "MARKER"
    path = touching_pickle(tmp_path / "tampered.pkl", marker)
    assert_plain_pickle_runs_it(path, marker)
    args = ["gpirt", option, str(path), "--task", "arc", "--scores", str(files["arc"])]
    result = subprocess.run([sys.executable, "-m", "calibft.cli", *args], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    # --params: refused by its git blob id before it is read; --own-params: by the restricted unpickler.
    refusal = "is not the upstream tinyBenchmarks.pkl" if option == "--params" else "asks for posix.system"
    assert refusal in result.stderr
    assert not marker.exists()


def test_cli_takes_one_parameters_file(capsys, files):
    with pytest.raises(SystemExit) as exit_info:
        main(["gpirt", "--params", "a.pkl", "--own-params", "b.pkl", "--task", "arc", "--scores", str(files["arc"])])
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_cli_refuses_an_unknown_task(capsys, files):
    with pytest.raises(SystemExit) as exit_info:
        main(["gpirt", "--own-params", str(files["params"]), "--task", "boolq", "--scores", str(files["arc"])])
    assert exit_info.value.code == 2 and "invalid choice: 'boolq'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------
# The batched likelihood and the bootstrap's resampled estimates


def _random_problems(count: int):
    """Problems of every shape the fits meet: 1-11 dimensions, 5-120 items, scales from flat to saturating (many
    terms clipped), binary and continuous scores."""
    rng = np.random.default_rng(0)
    for k in range(count):
        D, n = int(rng.integers(1, 12)), int(rng.integers(5, 121))
        A = rng.normal(size=(D, n)) * rng.uniform(0.1, 20.0)
        B = rng.normal(size=n) * rng.uniform(0.1, 20.0)
        y = rng.random(n) if k % 3 == 0 else (rng.random(n) < rng.uniform(0, 1)).astype(float)
        yield A, B, y


def test_the_batched_likelihood_is_each_single_one_bit_for_bit():
    rng = np.random.default_rng(1)
    for A, B, y in _random_problems(40):
        thetas = rng.normal(size=(7, A.shape[0])) * 5
        batched = gpirt.batch_negative_log_likelihood(thetas, A, B, y)
        assert batched.tolist() == [gpirt.negative_log_likelihood(theta, A, B, y) for theta in thetas]


def test_the_batched_gradient_is_scipys_forward_difference_bit_for_bit():
    """scipy's public forward difference with BFGS's step, at ordinary points and at coordinates so large that
    the step vanishes (where scipy falls back to a relative step)."""
    rng = np.random.default_rng(2)
    for A, B, y in _random_problems(40):
        D = A.shape[0]
        for theta in (rng.normal(size=D) * 5, np.where(rng.random(D) < 0.5, 1e17, -3.0), np.zeros(D)):
            want = approx_fprime(theta, gpirt.negative_log_likelihood, gpirt.DIFFERENCE_STEP, A, B, y)
            assert gpirt.forward_difference_gradient(theta, A, B, y).tolist() == want.tolist()


def test_a_batched_fit_takes_the_steps_of_the_plain_fit():
    """The same values at every finite-difference point, so BFGS stops at the same theta, to the last bit."""
    for A, B, y in _random_problems(60):
        assert gpirt.fit_theta(A, B, y, batched=True).tolist() == gpirt.fit_theta(A, B, y).tolist()


@pytest.mark.parametrize("task", ["mmlu", "gsm8k", "truthfulqa"])
def test_resampling_every_anchor_once_in_order_is_the_estimate(params, task):
    scenario = gpirt.scenario_data(params, task)
    scores = scores_for(task, seed=6)
    point = gpirt.estimate_scenario(scenario, scores)
    replicate = gpirt.resampled_estimates(scenario, scores, np.arange(100)[None, :])
    assert {key: values.shape for key, values in replicate.items()} == {"irt": (1,), "pirt": (1,), "gpirt": (1,)}
    assert {key: float(values[0]) for key, values in replicate.items()} == point  # the same fit and sums


def test_a_resample_of_correct_anchors_has_the_sum_of_their_weights_as_irt(params):
    scenario = gpirt.scenario_data(params, "winogrande")
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 100).astype(float)
    correct = np.flatnonzero(y == 1)
    picks = rng.choice(correct, size=(3, 100))  # only correct anchors, many picked several times
    draws = gpirt.resampled_estimates(scenario, y, picks)
    for i, row in enumerate(picks):
        weights = 0.0
        for j in row:
            weights += float(scenario.anchor_weights[j])
        assert draws["irt"][i] == pytest.approx(weights, rel=1e-9)
    assert np.all(np.isfinite(draws["pirt"])) and np.all(np.isfinite(draws["gpirt"]))


def test_the_irt_of_a_resample_with_repeats_weighs_each_pick(params):
    scenario = gpirt.scenario_data(params, "hellaswag")
    y = np.asarray(scores_for("hellaswag", seed=8))
    picks = np.random.default_rng(3).integers(0, 100, size=(4, 100))
    assert all(len(set(row.tolist())) < 100 for row in picks)  # every resample repeats some anchors
    draws = gpirt.resampled_estimates(scenario, y, picks)
    want = [sum(float(scenario.anchor_weights[j]) * float(y[j]) for j in row) for row in picks]
    assert draws["irt"] == pytest.approx(want, rel=1e-9)
    assert draws["irt"] == pytest.approx([np.dot(scenario.anchor_weights[row], y[row]) for row in picks], rel=1e-12)
    # and gp-IRT mixes each replicate's irt and p-IRT with the scenario's lambda
    mixed = scenario.lam * draws["irt"] + (1 - scenario.lam) * draws["pirt"]
    assert draws["gpirt"] == pytest.approx(mixed, rel=1e-9)
