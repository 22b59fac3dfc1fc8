"""The prompt sets: the 1988-prompt training grid, the 24 unseen-parameter and 18 held-out-family prompts.

The training grid is the Cartesian product of per-family axes (docs/method.md, The prompt grid); derived
parameters are computed in floating point in the authors' order so that every rendered prompt is byte-identical.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from calibft.core.checks import check_choice
from calibft.data.families import FAMILIES

SPLITS = ("train", "unseen", "ood")
PROMPT_TEMPLATE = (
    "Generate exactly ONE random number from a {display} distribution with parameters {params}. Output ONLY the number."
)


@dataclass(frozen=True)
class Prompt:
    id: str
    family: str
    params: dict[str, float]
    prompt: str


def read_prompts(path: str) -> list[Prompt]:
    """The prompts of a prompts file (results/prompts/{split}.jsonl: one JSON object per prompt with `id`,
    `family`, `params` and `prompt`). ValueError naming the file, the line and the fix when it is empty or a
    line is not such a prompt (or not JSON: `read_jsonl`)."""
    from calibft.core.io import read_jsonl, remake

    records = read_jsonl(path)
    if not records:
        raise ValueError(f"{path} holds no prompts; {remake(path)}")
    fields = {"id", "family", "params", "prompt"}
    prompts = []
    for i, record in enumerate(records):
        if set(record) != fields or record["family"] not in FAMILIES or not isinstance(record["params"], dict):
            raise ValueError(
                f"{path}: prompt {i + 1} ({str(record)[:80]}) is not a prompt: expected exactly the fields "
                f"{', '.join(sorted(fields))}, a family of {', '.join(FAMILIES)} and params as an object; "
                f"{remake(path)}"
            )
        prompts.append(Prompt(**record))
    return prompts


def render_prompt(family_id: str, params: Mapping[str, float]) -> str:
    """The user message for a family and its parameters (every value printed as a Python float repr)."""
    family = FAMILIES[family_id]
    rendered = ", ".join(f"{name}={float(params[name])!r}" for name in family.params)
    return PROMPT_TEMPLATE.format(display=family.display, params=rendered)


def _lin(a: float, b: float, n: int) -> list[float]:
    return [float(v) for v in np.linspace(a, b, n)]


# `numpy.geomspace(start, stop, num)` of the axes below, as the authors' run computed it, written out: geomspace
# goes through numpy's float64 `power`, whose kernel numpy picks at run time from the CPU's features, and the
# AVX-512 kernel rounds 4 of these 132 values differently from the AVX2 one (51 training prompts, for example
# `lambda=1.740350294214205` against `1.7403502942142053`). Neither kernel rounds correctly: 48 values lie 1
# to 3 units in the last place from the exact geometric sequence. tests/test_grid.py checks every value
# against that sequence and the rendered prompts against the authors' artifact.
# fmt: off
GEOMSPACE: dict[tuple[float, float, int], tuple[float, ...]] = {
    (0.5, 2.0, 11): (
        0.5, 0.5743491774985174, 0.6597539553864471, 0.7578582832551991, 0.8705505632961241, 1.0,
        1.148698354997035, 1.3195079107728944, 1.5157165665103982, 1.7411011265922482, 2.0,
    ),
    (0.5, 5.0, 11): (
        0.5, 0.6294627058970836, 0.7924465962305568, 0.9976311574844399, 1.25594321575479, 1.5811388300841898,
        1.9905358527674866, 2.505936168136362, 3.1547867224009667, 3.9716411736214083, 5.0,
    ),
    (0.5, 5.0, 25): (
        0.5, 0.5503470856261048, 0.6057638293142942, 0.666760716081662, 0.7338996338110347, 0.807799049219937,
        0.8891397050194614, 0.9786708907438301, 1.077217345015942, 1.1856868528308275, 1.3050786078412682,
        1.4364924166768323, 1.5811388300841898, 1.740350294214205, 1.9155934247786435, 2.108482517142911,
        2.320794416806389, 2.5544848872534636, 2.811706625951745, 3.0948290944563026, 3.4064603452898052,
        3.7494710466622787, 4.1270209263400925, 4.542587878258432, 5.0,
    ),
    (0.25, 1.25, 11): (
        0.25, 0.2936547357720048, 0.3449324153653037, 0.4051641491731906, 0.47591348467896966,
        0.5590169943749476, 0.6566319511009419, 0.7712923284000122, 0.9059745795971196, 1.064174903150981, 1.25,
    ),
    (0.5, 2.0, 25): (
        0.5, 0.5297315471796477, 0.5612310241546865, 0.5946035575013605, 0.6299605249474366, 0.6674199270850172,
        0.7071067811865476, 0.7491535384383408, 0.7937005259840997, 0.8408964152537145, 0.8908987181403393,
        0.9438743126816934, 1.0, 1.059463094359295, 1.122462048309373, 1.189207115002721, 1.2599210498948732,
        1.3348398541700344, 1.414213562373095, 1.4983070768766815, 1.5874010519681996, 1.681792830507429,
        1.7817974362806783, 1.8877486253633866, 2.0,
    ),
    (1.0, 5.0, 11): (
        1.0, 1.174618943088019, 1.379729661461215, 1.6206565966927626, 1.9036539387158786, 2.2360679774997902,
        2.6265278044037674, 3.0851693136000486, 3.6238983183884783, 4.256699612603924, 5.0,
    ),
    (1.0, 8.0, 11): (
        1.0, 1.2311444133449163, 1.515716566510398, 1.8660659830736148, 2.2973967099940698, 2.82842712474619,
        3.4822022531844965, 4.2870938501451725, 5.278031643091577, 6.498019170849885, 8.0,
    ),
    (0.5, 5.0, 5): (
        0.5, 0.8891397050194614, 1.5811388300841898, 2.811706625951745, 5.0,
    ),
    (1.5, 4.0, 11): (
        1.5, 1.6545813786331047, 1.8250930256796172, 2.013176623041764, 2.22064303492292, 2.449489742783178,
        2.701920077041227, 2.9803644306848924, 3.2875036590344515, 3.626294890951067, 4.0,
    ),
    (0.5, 3.0, 11): (
        0.5, 0.5981155994256577, 0.7154845405526278, 0.8558849297048525, 1.0238362555396097, 1.224744871391589,
        1.4650780257917608, 1.7525720432035965, 2.096481356314738, 2.507876406233811, 3.0,
    ),
}
# fmt: on


def _geom(a: float, b: float, n: int) -> list[float]:
    return list(GEOMSPACE[(float(a), float(b), n)])


def _floats(values: list[float]) -> list[float]:
    return [float(v) for v in values]


_BINOMIAL_P = [0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8]

# family -> (axes in product order, function from one axis point to the prompt parameters)
Axes = list[tuple[str, list[float]]]
TRAIN_AXES: dict[str, tuple[Axes, Callable[[dict[str, float]], dict[str, float]] | None]] = {
    "uniform": ([("a", _lin(-5, 2, 11)), ("width", _lin(1, 5, 11))], lambda x: {"a": x["a"], "b": x["a"] + x["width"]}),
    "gaussian": ([("mu", _lin(-2, 2, 11)), ("sigma", _geom(0.5, 2, 11))], None),
    "beta": ([("alpha", _geom(0.5, 5, 11)), ("beta", _geom(0.5, 5, 11))], None),
    "binomial": ([("n", _floats([5, 10, 15, 20])), ("p", _BINOMIAL_P)], None),
    "exponential": ([("lambda", _geom(0.5, 5, 25))], None),
    "geometric": ([("p", [0.2, 0.225, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.775, 0.8])], None),
    "negative_binomial": ([("r", _floats([3, 5, 8, 12])), ("p", _BINOMIAL_P)], None),
    "lognormal": ([("mu", _lin(-1, 1.5, 11)), ("sigma", _geom(0.25, 1.25, 11))], None),
    "triangular": (
        [("a", _lin(-3, 1, 5)), ("width", _lin(1, 5, 5)), ("mode_fraction", [0.1, 0.3, 0.5, 0.7, 0.9])],
        lambda x: {"a": x["a"], "c": x["a"] + x["width"] * x["mode_fraction"], "b": x["a"] + x["width"]},
    ),
    "rayleigh": ([("sigma", _geom(0.5, 2, 25))], None),
    "cauchy": ([("x0", _lin(-2, 2, 11)), ("gamma", _geom(0.5, 2, 11))], None),
    "student_t": ([("nu", [2.5, 2.75, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])], None),
    "chi_square": ([("nu", _floats([2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20]))], None),
    "f_distribution": ([("d1", _floats([3, 5, 7, 10])), ("d2", _floats([5, 10, 15, 20]))], None),
    "gamma": ([("alpha", _geom(1, 5, 11)), ("beta", _geom(1, 5, 11))], None),
    "laplace": ([("mu", _lin(-2, 2, 11)), ("b", _geom(0.5, 2, 11))], None),
    "logistic": ([("mu", _lin(-2, 2, 11)), ("s", _geom(0.5, 2, 11))], None),
    "pareto": ([("alpha", [2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 4.5, 5.0]), ("xm", _geom(0.5, 2, 11))], None),
    "hypergeometric": (
        [("M", _floats([30, 50, 80])), ("N", _floats([5, 10, 15])), ("success_fraction", [0.2, 0.35, 0.5, 0.65, 0.8])],
        # round() on a float is banker's rounding, as in the authors' code
        lambda x: {"M": x["M"], "K": float(round(x["M"] * x["success_fraction"])), "N": x["N"]},
    ),
    "gumbel": ([("mu", _lin(-2, 2, 11)), ("beta", _geom(0.5, 2, 11))], None),
    "skellam": ([("mu1", _geom(1, 8, 11)), ("mu2", _geom(1, 8, 11))], None),
    "beta_binomial": ([("n", _floats([10, 20, 30])), ("alpha", _geom(0.5, 5, 5)), ("beta", _geom(0.5, 5, 5))], None),
    "lomax": ([("alpha", _geom(1.5, 4, 11)), ("lambda", _geom(0.5, 3, 11))], None),
    "inverse_gaussian": ([("mu", _geom(0.5, 3, 11)), ("lambda", _geom(0.5, 5, 11))], None),
}

UNSEEN_PARAMS: list[tuple[str, dict[str, float]]] = [
    ("uniform", {"a": 3.5, "b": 10.5}),
    ("gaussian", {"mu": 3.5, "sigma": 3.0}),
    ("beta", {"alpha": 7.0, "beta": 7.0}),
    ("binomial", {"n": 25.0, "p": 0.5}),
    ("exponential", {"lambda": 7.0}),
    ("geometric", {"p": 0.125}),
    ("negative_binomial", {"r": 15.0, "p": 0.15}),
    ("lognormal", {"mu": 2.5, "sigma": 2.0}),
    ("triangular", {"a": 2.5, "c": 6.0, "b": 9.5}),
    ("rayleigh", {"sigma": 3.0}),
    ("cauchy", {"x0": 3.5, "gamma": 3.0}),
    ("student_t", {"nu": 16.0}),
    ("chi_square", {"nu": 32.0}),
    ("f_distribution", {"d1": 12.0, "d2": 24.0}),
    ("gamma", {"alpha": 7.0, "beta": 7.0}),
    ("laplace", {"mu": 3.5, "b": 3.0}),
    ("logistic", {"mu": 3.5, "s": 3.0}),
    ("pareto", {"alpha": 6.5, "xm": 3.5}),
    ("hypergeometric", {"M": 100.0, "K": 50.0, "N": 20.0}),
    ("gumbel", {"mu": 3.5, "beta": 3.0}),
    ("skellam", {"mu1": 10.5, "mu2": 10.5}),
    ("beta_binomial", {"n": 40.0, "alpha": 6.5, "beta": 6.5}),
    ("lomax", {"alpha": 6.0, "lambda": 4.5}),
    ("inverse_gaussian", {"mu": 5.0, "lambda": 7.0}),
]

OOD_PARAMS: list[tuple[str, dict[str, float]]] = [
    *(("bernoulli", {"p": p}) for p in (0.1, 0.5, 0.9)),
    *(("poisson", {"lambda": lam}) for lam in (1.0, 4.0, 12.0)),
    *(("weibull", {"k": v, "lambda": v}) for v in (0.5, 1.5, 3.0)),
    *(("maxwell", {"scale": s}) for s in (0.75, 1.5, 2.5)),
    *(("chi", {"df": df}) for df in (2.0, 5.0, 10.0)),
    *(
        ("truncnorm", {"mu": mu, "sigma": sigma, "lower": lower, "upper": upper})
        for mu, sigma, lower, upper in ((0.0, 1.0, -1.0, 1.0), (0.0, 1.0, -2.0, 2.0), (1.0, 1.5, -1.0, 2.0))
    ),
]


def _train_points() -> Iterator[tuple[str, dict[str, float]]]:
    for family_id, (axes, derive) in TRAIN_AXES.items():
        names = [name for name, _ in axes]
        for values in itertools.product(*(values for _, values in axes)):
            point = dict(zip(names, values, strict=True))
            yield family_id, derive(point) if derive else point


def _numbered(points: Iterator[tuple[str, dict[str, float]]]) -> list[Prompt]:
    """Prompts with stable ids `{family}-{k:03d}`, k counting within the family in grid order."""
    counts: dict[str, int] = {}
    prompts = []
    for family_id, params in points:
        k = counts.get(family_id, 0)
        counts[family_id] = k + 1
        params = {name: float(params[name]) for name in FAMILIES[family_id].params}
        prompts.append(Prompt(f"{family_id}-{k:03d}", family_id, params, render_prompt(family_id, params)))
    return prompts


def prompts(split: str) -> list[Prompt]:
    """The prompts of one split (`train`, `unseen` or `ood`) in grid order."""
    check_choice("split", split, SPLITS)
    if split == "train":
        return _numbered(_train_points())
    return _numbered(iter(UNSEEN_PARAMS if split == "unseen" else OOD_PARAMS))


def select(split_prompts: list[Prompt], ids: list[str] | None) -> list[Prompt]:
    """The prompts with these ids, in the order given; all of them when ids is None."""
    if ids is None:
        return split_prompts
    by_id = {p.id: p for p in split_prompts}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise KeyError(f"unknown prompt id(s) {', '.join(unknown)}; ids look like {split_prompts[0].id!r}")
    return [by_id[i] for i in ids]


def evenly_spaced(items: Sequence, count: int | None) -> list:
    """`count` items spread over the sequence, first included (all of them when count is None or larger)."""
    if count is None or count >= len(items):
        return list(items)
    return [items[i] for i in np.linspace(0, len(items) - 1, count).round().astype(int)]


def evaluated_ids(split: str, count: int | None, keep: Sequence[str] = ()) -> list[str] | None:
    """The prompts an evaluation of `split` samples: all of them (None) when `count` is None, else `count`
    prompts evenly spaced over the split and every prompt of `keep` that is in it (the ones a figure draws),
    in the split's order."""
    if count is None:
        return None
    split_prompts = prompts(split)
    chosen = {p.id for p in evenly_spaced(split_prompts, count)} | set(keep)
    return [p.id for p in split_prompts if p.id in chosen]
