"""The tinyBenchmarks gp-IRT estimator (docs/metrics.md, TinyBenchmarks and gp-IRT), written from its formulas.

A tiny benchmark scores 100 anchor items; gp-IRT turns the 100 item scores into an estimate of the accuracy on
the full benchmark from a fitted multidimensional IRT model.

- `load_params(path)`: the parameters pickle (`tinyBenchmarks.pkl`, downloaded by the workflow at run time),
  read by a restricted unpickler (`ParamsUnpickler`) that builds plain containers, numbers, numpy arrays and
  dtypes and nothing else, so that reading the file runs no code from it; then checked for the structure
  below. The download itself is verified by its git blob id before it is read (calibft.pipeline.assets).
- `item_probabilities(A, B, theta)`: P_i(theta) = sigmoid(sum_d clip(A[d, i] * theta_d - B[i], -30, 30)), the
  sigmoid computed as upstream does, 1 / (1 + exp(-z)) (see `sigmoid`).
- `fit_theta(A_seen, B_seen, scores)`: the ability theta minimizing the Bernoulli negative log-likelihood
  -sum_j [y_j log(P_j + eps) + (1 - y_j) log(1 - P_j + eps)] (eps = 1e-10) of the seen items, by BFGS from 0
  with scipy's finite-difference gradient, as upstream; continuous scores y_j in [0, 1] are used as they are.
- `scenario_data(params, task)`: the `Scenario` (frozen dataclass) of one of our tasks, its items numbered in
  the order of `scenarios_position[scenario]`.
- `estimate(params, task, scores)`: {"irt", "pirt", "gpirt"} as floats, with
  irt = sum_j w_j y_j (anchor weights `examples_weights[scenario]`, seen items in order),
  pirt = l * mean_seen(bw * y) + (1 - l) * mean_unseen(bw * P(theta)), l = 100 / N_scenario,
  gpirt = lam * irt + (1 - lam) * pirt, lam = `optimal_lambdas[scenario]`;
  the balance weight of an item of subscenario s is bw = N_scenario / (n_subscenarios * n_items_in_s) for every
  scenario (1 for a scenario of one subscenario, and for an item in no subscenario).
- `resampled_estimates(scenario, scores, picks)`: the estimate on each bootstrap resample of the anchors (each
  picked anchor with its score, weight and parameters; the unseen items unchanged), for its interval.
- `load_scores(path)`: the JSON list of the 100 item scores, in dataset row order.
- `synthetic_params(seed)` / `write_synthetic_params(path, seed)`: a small parameter dict in the real file's
  structure, deterministic from its seed, for the demo profile and the tests. Its numbers mean nothing.

Structure of the pickle, from the public tinyBenchmarks code (github.com/felipemaiapolo/tinyBenchmarks,
`tinyBenchmarks/__init__.py`; the same access pattern in lm-evaluation-harness and lighteval):

    {"lb" | "mmlu" | ...: {
        "seen_examples": int sequence, global item indices of the anchors, 100 per scenario, scenario after
                         scenario in the order of `scenarios_position`,
        "examples_weights": {scenario: 100 anchor weights, aligned with that scenario's seen items},
        "irt_parameters": {"A": array (1, D, N), "B": array (1, 1, N)},
        "optimal_lambdas": {scenario: float},
        "scenarios_position": {scenario: int sequence, global item indices},
        "subscenarios_position": {scenario: {subscenario: int sequence, global item indices}},
    }}

The k-th scenario of an entry (in `scenarios_position` order) owns `seen_examples[100k : 100k + 100]`, and the
100 scores map in order onto those indices: the items must stay in dataset row order. 'lb' holds the Open LLM
Leaderboard scenarios (truthfulqa, gsm8k, winogrande, arc, hellaswag, then mmlu); MMLU is estimated from the
'mmlu' entry, whose single scenario 'mmlu' has the 57 subjects as subscenarios.

Assumptions about the pinned file, which its loading checks or tolerates:
- Scenario names: current upstream code looks 'lb' scenarios up by 'truthfulqa', 'gsm8k', 'winogrande', 'arc',
  'hellaswag', while the upstream README of an earlier version shows 'harness_truthfulqa_mc_0' for TruthfulQA.
  `PARAMS_ENTRIES` therefore lists accepted names per task, and the first one present in the entry is used.
- Every seen index of a scenario's slice lies inside that scenario (true of anchors picked per scenario); a
  slice that does not is refused rather than silently filtered as upstream does.
- The real file holds only what the structure above needs (dicts, lists, numbers, strings, numpy arrays of
  numbers): `ParamsUnpickler` refuses every other type, naming it, and arrays of dtype object.
"""

from __future__ import annotations

import codecs
import json
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy._core import multiarray, numeric
from scipy.optimize import minimize

from calibft.core.checks import check_choice

N_SEEN = 100  # anchor items per scenario: the size of a tiny benchmark
CLIP = 30.0  # bound on each dimension's term of the logit
EPS = 1e-10  # inside the logarithms of the likelihood, as upstream

# Our task -> (pickle entry, names its scenario may have in that entry, first present wins).
PARAMS_ENTRIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "mmlu": ("mmlu", ("mmlu",)),
    "truthfulqa": ("lb", ("truthfulqa", "harness_truthfulqa_mc_0")),
    "gsm8k": ("lb", ("gsm8k",)),
    "winogrande": ("lb", ("winogrande",)),
    "hellaswag": ("lb", ("hellaswag",)),
    "arc": ("lb", ("arc",)),
}
ENTRIES = ("lb", "mmlu")
ENTRY_KEYS = (
    "seen_examples",
    "examples_weights",
    "irt_parameters",
    "optimal_lambdas",
    "scenarios_position",
    "subscenarios_position",
)


@dataclass(frozen=True)
class Scenario:
    """What the estimator needs of one scenario; items numbered 0..n-1 in `scenarios_position` order."""

    name: str  # the scenario's name in the pickle
    A: np.ndarray  # (D, n) discriminations
    B: np.ndarray  # (n,) difficulties
    seen: np.ndarray  # (100,) the anchor items, in score order
    anchor_weights: np.ndarray  # (100,) irt weights of the anchors, in score order
    balance_weights: np.ndarray  # (n,)
    lam: float  # gp-IRT mixing weight of irt

    @property
    def size(self) -> int:
        return int(self.B.shape[0])


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """`_codecs.encode` as protocol 2 uses it to pickle bytes (an array's raw data): latin-1 only, so that a
    file cannot reach any other codec."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r}: only 'latin1' encodes pickled bytes")
    return codecs.encode(text, "latin1")


def _allowed_globals() -> dict[tuple[str, str], Any]:
    """The only globals a parameters pickle may name, each resolved from a real import.

    Numpy 2 pickles arrays from `numpy._core`; files pickled by numpy 1 (the upstream file) name `numpy.core`,
    which numpy 2 keeps as an alias of the same functions for old pickles.
    """
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,  # the class `_reconstruct` builds (protocols 2-4)
        ("numpy", "dtype"): np.dtype,  # an array's or scalar's dtype
        ("_codecs", "encode"): _latin1_bytes,  # protocol 2's form of bytes: an array's raw data
    }
    for package in ("numpy._core", "numpy.core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct  # an empty array to fill
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar  # a numpy scalar (np.float64)
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer  # an array, protocol 5
    return allowed


class ParamsUnpickler(pickle.Unpickler):
    """An unpickler that runs no code from the file: it builds what the pickle protocol builds by itself (dict,
    list, tuple, str, bytes, int, float, bool, None) and the numpy arrays, scalars and dtypes of
    `_allowed_globals`. Any other global (a function to call, a class to instantiate) is refused by name."""

    ALLOWED = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it asks for {module}.{name}, which a tinyBenchmarks parameters file does not hold (only plain "
                "containers, numbers and numpy arrays of numbers are read; nothing in the file is run)"
            ) from None


def _refuse_object_arrays(value: Any) -> None:
    """Raise pickle.UnpicklingError at an array of dtype object: its items are arbitrary Python objects, which
    the parameters never are (the items themselves came through `find_class`, so nothing ran).

    Walks dicts, lists and tuples without recursion and visits each once: a pickle can nest deeply, or hold a
    list that contains itself."""
    pending: list[tuple[Any, str]] = [(value, "the pickle")]
    seen: set[int] = set()
    while pending:
        item, where = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray | np.generic) and item.dtype.hasobject:
            raise pickle.UnpicklingError(f"{where} is a numpy array of dtype {item.dtype}, not of numbers")
        if isinstance(item, Mapping):
            pending += [(child, f"{where}[{key!r}]") for key, child in item.items()]
        elif isinstance(item, list | tuple):
            pending += [(child, f"{where}[{i}]") for i, child in enumerate(item)]


# What reading a damaged or foreign pickle raises: refused globals and bad opcodes (UnpicklingError), a cut
# file (EOFError), memo or stack errors (IndexError, KeyError), and the allowed numpy functions called with
# bad arguments (TypeError, ValueError).
_UNREADABLE = (pickle.UnpicklingError, EOFError, IndexError, KeyError, TypeError, ValueError)


def read_params_pickle(path: str | Path) -> Any:
    """What the pickle at `path` holds, read by `ParamsUnpickler` and refused if it holds object arrays.

    Raises ValueError naming the file, what is wrong and what to do.
    """
    path = Path(path)
    with path.open("rb") as handle:
        try:
            value = ParamsUnpickler(handle).load()
            _refuse_object_arrays(value)
        except _UNREADABLE as err:
            raise ValueError(
                f"{path} is not a readable tinyBenchmarks parameters pickle: {err}. Use the upstream "
                "tinyBenchmarks.pkl, or save your parameters as dicts, lists and numpy arrays of numbers"
            ) from err
    return value


def load_params(path: str | Path) -> dict:
    """The parameters pickle, read without running code from it (`read_params_pickle`), checked to hold the 'lb'
    and 'mmlu' entries with the keys the estimator reads."""
    params = read_params_pickle(path)
    check_params(params, source=str(path))
    return params


def check_params(params: Any, source: str = "parameters") -> None:
    """Raise ValueError naming every missing entry or key; extra entries (helm_lite, alpaca) are allowed."""
    if not isinstance(params, Mapping):
        raise ValueError(f"{source}: expected a dict of benchmark entries, got {type(params).__name__}")
    missing = [entry for entry in ENTRIES if entry not in params]
    for entry in ENTRIES:
        if entry not in params:
            continue
        if not isinstance(params[entry], Mapping):
            missing.append(f"{entry} (not a dict)")
            continue
        missing += [f"{entry}.{key}" for key in ENTRY_KEYS if key not in params[entry]]
        irt = params[entry].get("irt_parameters")
        if isinstance(irt, Mapping):
            missing += [f"{entry}.irt_parameters.{key}" for key in ("A", "B") if key not in irt]
        elif irt is not None:
            missing.append(f"{entry}.irt_parameters (not a dict)")
    if missing:
        raise ValueError(f"{source}: missing or malformed keys: {', '.join(missing)}")


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)), in upstream's floating-point operations (tinyBenchmarks `sigmoid`).

    Not `scipy.special.expit`, which takes the C library's exp whatever numpy runs. Where numpy runs its
    AVX-512 kernels (numpy imported before calibft, on a CPU with AVX-512: see calibft.core.cpu), numpy's exp
    rounds the last bit differently for about 2% of inputs, and the likelihood is minimized by BFGS with a
    finite-difference gradient, which magnifies that by about 1e8: BFGS then takes other steps and stops
    elsewhere, up to 5e-4 away in p-IRT on synthetic files, for every task (ARC's was noticed first). With
    upstream's operations the objective is upstream's on the same machine, so BFGS takes the same steps there.
    (Under calibft's pinned kernels numpy's exp is the C library's, and both give the same bits.) Across machines
    BFGS's own dot products go through the BLAS library's kernels, which also differ in their last bits between
    CPUs, so where BFGS stops still differs slightly from one CPU to another; the tests compare the fit where it
    is well conditioned (tests/evals/test_gpirt.py).
    """
    return 1.0 / (1.0 + np.exp(-z))


def item_probabilities(A: np.ndarray, B: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """P_i(theta) for items with discriminations A (D, n) and difficulties B (n,), ability theta (D,)."""
    A = np.asarray(A, dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64).reshape(-1, 1)
    terms = np.clip(A * theta - np.asarray(B, dtype=np.float64)[None, :], -CLIP, CLIP)
    return sigmoid(terms.sum(axis=0))


def negative_log_likelihood(theta: np.ndarray, A: np.ndarray, B: np.ndarray, scores: np.ndarray) -> float:
    """Bernoulli negative log-likelihood of (possibly fractional) scores, with EPS inside the logarithms."""
    p = item_probabilities(A, B, theta)
    return float(-np.sum(scores * np.log(p + EPS) + (1.0 - scores) * np.log(1.0 - p + EPS)))


def batch_negative_log_likelihood(thetas: np.ndarray, A: np.ndarray, B: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """[K]: `negative_log_likelihood` of each row of thetas [K, D], in the same floating-point operations per row
    (elementwise the same ufuncs, the same sums in the same order), so each value is bit for bit the single one."""
    terms = np.clip(A[None] * thetas[:, :, None] - B[None, None, :], -CLIP, CLIP)
    p = sigmoid(terms.sum(axis=1))
    return -np.sum(scores * np.log(p + EPS) + (1.0 - scores) * np.log(1.0 - p + EPS), axis=1)


# The step of BFGS's forward differences: scipy.optimize.minimize's default `eps`, an absolute step.
DIFFERENCE_STEP = np.sqrt(np.finfo(np.float64).eps)


def forward_difference_gradient(theta: np.ndarray, A: np.ndarray, B: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """[D]: the gradient of `negative_log_likelihood` at theta as scipy's BFGS takes it by forward differences
    (step DIFFERENCE_STEP per coordinate, or scipy's relative step where that one vanishes), in the same
    floating-point operations, its D + 1 points in one `batch_negative_log_likelihood` call."""
    D = len(theta)
    step = np.full(D, DIFFERENCE_STEP)
    step = np.where((theta + step) - theta == 0, step * ((theta >= 0) * 2.0 - 1) * np.maximum(1.0, np.abs(theta)), step)
    points = np.repeat(theta[None, :], D + 1, axis=0)
    points[np.arange(1, D + 1), np.arange(D)] = theta + step
    values = batch_negative_log_likelihood(points, A, B, scores)
    return (values[1:] - values[0]) / ((theta + step) - theta)


def fit_theta(
    A_seen: np.ndarray, B_seen: np.ndarray, scores: Sequence[float] | np.ndarray, batched: bool = False
) -> np.ndarray:
    """The (D,) ability minimizing the negative log-likelihood of the seen items: BFGS from 0, its gradient by
    scipy's forward differences. With `batched`, BFGS gets that gradient from `forward_difference_gradient`:
    the same values, so the same steps and the same result, at about a third of the time (the bootstrap's
    refits use it)."""
    A_seen = np.asarray(A_seen, dtype=np.float64)
    B_seen = np.asarray(B_seen, dtype=np.float64)
    y = np.asarray(scores, dtype=np.float64)
    gradient = forward_difference_gradient if batched else None
    x0 = np.zeros(A_seen.shape[0])
    result = minimize(negative_log_likelihood, x0, args=(A_seen, B_seen, y), method="BFGS", jac=gradient)
    return np.asarray(result.x, dtype=np.float64)


def _resolve(entry: Mapping, task: str) -> tuple[str, int]:
    """The task's scenario name in the entry and its position k among the entry's scenarios."""
    names = list(entry["scenarios_position"])
    for candidate in PARAMS_ENTRIES[task][1]:
        if candidate in names:
            return candidate, names.index(candidate)
    raise ValueError(
        f"task {task!r}: none of the scenarios {', '.join(PARAMS_ENTRIES[task][1])} in entry "
        f"{PARAMS_ENTRIES[task][0]!r} "
        f"(it has {', '.join(map(str, names))})"
    )


def _indices(values: Any, what: str) -> np.ndarray:
    array = np.asarray(values).reshape(-1)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what}: expected integer item indices, got dtype {array.dtype}")
    return array.astype(np.int64)


def scenario_data(params: Mapping, task: str) -> Scenario:
    """Resolve one of our tasks in the parameters: its items, anchors, weights and lambda."""
    check_params(params)
    check_choice("task", task, PARAMS_ENTRIES)
    entry_name = PARAMS_ENTRIES[task][0]
    entry = params[entry_name]
    name, k = _resolve(entry, task)
    A = np.asarray(entry["irt_parameters"]["A"], dtype=np.float64)
    B = np.asarray(entry["irt_parameters"]["B"], dtype=np.float64)
    if A.ndim != 3 or A.shape[0] != 1 or B.shape != (1, 1, A.shape[2]):
        raise ValueError(f"{entry_name}: irt_parameters A must be (1, D, N) and B (1, 1, N); got {A.shape}, {B.shape}")
    total = A.shape[2]

    seen_all = _indices(entry["seen_examples"], f"{entry_name}.seen_examples")
    n_seen, rest = divmod(seen_all.size, len(entry["scenarios_position"]))  # 100 in the real file
    if rest or n_seen == 0:
        raise ValueError(
            f"{entry_name}.seen_examples has {seen_all.size} indices, not the same number for each of its "
            f"{len(entry['scenarios_position'])} scenarios"
        )
    items = _indices(entry["scenarios_position"][name], f"{entry_name}.scenarios_position[{name!r}]")
    if items.size <= n_seen or len(np.unique(items)) != items.size or items.min() < 0 or items.max() >= total:
        raise ValueError(
            f"{entry_name}.scenarios_position[{name!r}]: expected more than {n_seen} distinct indices in 0..{total - 1}"
        )
    local = np.full(total, -1, dtype=np.int64)
    local[items] = np.arange(items.size)

    where = f"{entry_name}.seen_examples[{n_seen * k}:{n_seen * (k + 1)}]"
    seen_global = seen_all[n_seen * k : n_seen * (k + 1)]
    if seen_global.min() < 0 or seen_global.max() >= total or np.any(local[seen_global] < 0):
        raise ValueError(f"{where} are not all items of {name!r}")
    seen = local[seen_global]
    if len(np.unique(seen)) != n_seen:
        raise ValueError(f"{where} repeats an item")

    weights = np.asarray(entry["examples_weights"][name], dtype=np.float64)
    if weights.ndim == 0:
        weights = np.full(n_seen, float(weights))
    if weights.shape != (n_seen,):
        raise ValueError(f"{entry_name}.examples_weights[{name!r}]: expected {n_seen} weights, got {weights.shape}")

    balance = np.ones(items.size)
    subscenarios = entry["subscenarios_position"][name]
    for sub, positions in subscenarios.items():
        positions = _indices(positions, f"{entry_name}.subscenarios_position[{name!r}][{sub!r}]")
        if positions.size == 0:
            continue
        if positions.min() < 0 or positions.max() >= total or np.any(local[positions] < 0):
            raise ValueError(f"{entry_name}.subscenarios_position[{name!r}][{sub!r}] has items outside {name!r}")
        balance[local[positions]] = items.size / (len(subscenarios) * positions.size)

    return Scenario(
        name=name,
        A=A[0][:, items],
        B=B[0, 0, items],
        seen=seen,
        anchor_weights=weights,
        balance_weights=balance,
        lam=float(entry["optimal_lambdas"][name]),
    )


def check_scores(scores: Sequence[float] | np.ndarray, count: int = N_SEEN) -> np.ndarray:
    """The scores as a float array; ValueError unless they are `count` finite numbers in [0, 1]."""
    try:
        y = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"scores must be a list of {count} numbers in [0, 1] ({err})") from err
    if y.ndim != 1 or y.size != count:
        raise ValueError(f"expected {count} item scores, got {y.size if y.ndim == 1 else f'shape {y.shape}'}")
    bad = np.flatnonzero(~np.isfinite(y) | (y < 0.0) | (y > 1.0))
    if bad.size:
        raise ValueError(f"item scores must lie in [0, 1]; item {int(bad[0])} is {float(y[bad[0]])!r}")
    return y


def estimate_scenario(scenario: Scenario, scores: Sequence[float] | np.ndarray) -> dict[str, float]:
    """irt, pirt and gp-IRT of one scenario from the scores of its anchors (in `scenario.seen` order)."""
    y = check_scores(scores, len(scenario.seen))
    return estimate_anchors(scenario, y, np.arange(len(y)))


def estimate_anchors(scenario: Scenario, y: np.ndarray, picks: np.ndarray, batched: bool = False) -> dict[str, float]:
    """`estimate_scenario` on the anchors `picks` (positions in `scenario.seen`, repeats allowed): theta fitted on
    the picked anchors (`fit_theta`), the seen part their mean and irt the sum of their weighted scores; the
    unseen items stay those outside all the anchors. With every anchor once, in order, it is `estimate_scenario`."""
    seen, scores = scenario.seen[picks], y[picks]
    theta = fit_theta(scenario.A[:, seen], scenario.B[seen], scores, batched)
    unseen = np.ones(scenario.size, dtype=bool)
    unseen[scenario.seen] = False
    l = len(scenario.seen) / scenario.size
    seen_part = float(np.mean(scenario.balance_weights[seen] * scores))
    p_unseen = item_probabilities(scenario.A[:, unseen], scenario.B[unseen], theta)
    unseen_part = float(np.mean(scenario.balance_weights[unseen] * p_unseen))
    irt = float(np.dot(scenario.anchor_weights[picks], scores))
    pirt = l * seen_part + (1.0 - l) * unseen_part
    gpirt = scenario.lam * irt + (1.0 - scenario.lam) * pirt
    return {"irt": irt, "pirt": float(pirt), "gpirt": float(gpirt)}


def resampled_estimates(
    scenario: Scenario, scores: Sequence[float] | np.ndarray, picks: np.ndarray
) -> dict[str, np.ndarray]:
    """{"irt", "pirt", "gpirt"}, each [replicates]: the estimate of each row of `picks` ([replicates, anchors],
    a bootstrap resample of the anchors, `calibft.evals.bootstrap.resample_indices`) from the scores of the
    anchors it picks, the item and its score drawn together (`estimate_anchors`). One BFGS fit per replicate,
    the point estimate's (`fit_theta`, batched)."""
    y = check_scores(scores, len(scenario.seen))
    estimates = [estimate_anchors(scenario, y, row, batched=True) for row in np.asarray(picks)]
    return {key: np.array([e[key] for e in estimates], dtype=np.float64) for key in ("irt", "pirt", "gpirt")}


def estimate(params: Mapping, task: str, scores: Sequence[float] | np.ndarray) -> dict[str, float]:
    """{"irt", "pirt", "gpirt"} of one of our tasks from its 100 item scores in dataset row order."""
    return estimate_scenario(scenario_data(params, task), scores)


SCORES_FIX = "write the {count}item scores of the task's anchors, in dataset row order, each in [0, 1]"


def load_scores(path: str | Path, count: int | None = N_SEEN) -> list[float]:
    """The JSON list of item scores in a file, checked by `check_scores` to be `count` numbers in [0, 1] (no
    check of the count with None). ValueError naming the file, what is wrong and the fix otherwise."""
    path = Path(path)
    fix = SCORES_FIX.format(count=f"{count} " if count is not None else "")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}): {fix}, as a JSON list") from err
    if not isinstance(data, list) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in data):
        bad = next((v for v in data if isinstance(v, bool) or not isinstance(v, int | float)), None)
        got = f"an item is {bad!r}" if isinstance(data, list) else f"got a JSON {type(data).__name__}"
        raise ValueError(f"{path} must hold a JSON list of numbers ({got}): {fix}")
    try:
        check_scores(data, len(data) if count is None else count)
    except ValueError as err:
        raise ValueError(f"{path}: {err}: {fix}") from err
    return [float(v) for v in data]


# Synthetic parameters: the real file's structure at a small size.
SYNTHETIC_LB = {  # scenario -> subscenario sizes; the names and order of the real 'lb' entry
    "truthfulqa": {"harness_truthfulqa_mc_0": 137},
    "gsm8k": {"harness_gsm8k_5": 161},
    "winogrande": {"harness_winogrande_5": 149},
    "arc": {"harness_arc_challenge_25": 173},
    "hellaswag": {"harness_hellaswag_10": 211},
    "mmlu": {"harness_hendrycksTest_anatomy_5": 37, "harness_hendrycksTest_virology_5": 83, "other": 61},
}
SYNTHETIC_MMLU = {  # unequal subject sizes, so that balance weights differ
    "mmlu": {
        "harness_hendrycksTest_abstract_algebra_5": 23,
        "harness_hendrycksTest_anatomy_5": 41,
        "harness_hendrycksTest_astronomy_5": 67,
        "harness_hendrycksTest_virology_5": 29,
        "harness_hendrycksTest_world_religions_5": 97,
    }
}


def _synthetic_entry(rng: np.random.Generator, layout: Mapping[str, Mapping[str, int]], dim: int, n_seen: int) -> dict:
    total = sum(sum(subs.values()) for subs in layout.values())
    A = rng.gamma(2.0, 0.5, size=(1, dim, total)) * rng.choice([-1.0, 1.0], size=(1, dim, total), p=[0.2, 0.8])
    B = rng.normal(0.0, 1.0, size=(1, 1, total))
    seen, weights, lambdas, scenarios, subscenarios = [], {}, {}, {}, {}
    start = 0
    for name, subs in layout.items():
        size = sum(subs.values())
        positions = np.arange(start, start + size)
        scenarios[name] = positions.tolist()
        shuffled = rng.permutation(positions)  # subscenarios interleave, as nothing requires them contiguous
        cuts = np.cumsum(list(subs.values()))[:-1]
        subscenarios[name] = {
            sub: sorted(part.tolist()) for sub, part in zip(subs, np.split(shuffled, cuts), strict=True)
        }
        seen += rng.choice(positions, size=n_seen, replace=False).tolist()  # not sorted: order matters
        weights[name] = rng.dirichlet(np.ones(n_seen))
        lambdas[name] = float(rng.uniform(0.2, 0.8))
        start += size
    return {
        "seen_examples": seen,
        "examples_weights": weights,
        "irt_parameters": {"A": A, "B": B},
        "optimal_lambdas": lambdas,
        "scenarios_position": scenarios,
        "subscenarios_position": subscenarios,
    }


def synthetic_params(seed: int = 0, dim: int = 3, n_seen: int = N_SEEN) -> dict:
    """Parameters in the real file's structure, small ('lb': 6 scenarios, 'mmlu': 5 unequal subjects), with
    `n_seen` anchors per scenario (100 as in the real file; fewer for a demo with a few items per task)."""
    rng = np.random.default_rng(seed)
    return {
        "lb": _synthetic_entry(rng, SYNTHETIC_LB, dim, n_seen),
        "mmlu": _synthetic_entry(rng, SYNTHETIC_MMLU, dim, n_seen),
    }


def write_synthetic_params(path: str | Path, seed: int = 0, dim: int = 3, n_seen: int = N_SEEN) -> Path:
    """Pickle `synthetic_params(seed, dim, n_seen)` to path (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        pickle.dump(synthetic_params(seed, dim, n_seen), handle)
    return path
