import math

import numpy as np
import pytest

from calibft.artifacts.runs import (
    Titles,
    first_seen,
    join_words,
    mean_interval,
    number,
    read_runs_by_split,
    run_interval,
    run_intervals,
)
from calibft.evals.bootstrap import interval_block

TITLES = Titles({}, {"base": "Base", "soft": "Soft", "hard": "Hard"})


def test_number_is_nan_where_undefined():
    assert number(2) == 2.0 and math.isnan(number(None)) and math.isnan(number(float("inf")))


def test_models_and_conditions_in_order_of_first_appearance():
    a = {"m1": {"base": {}, "soft": {}}, "m2": {"hard": {}}}
    b = {"m3": {"soft": {}, "ssot": {}}, "m1": {}}
    assert first_seen(a, b) == ["m1", "m2", "m3"]
    assert TITLES.shown(a, b) == ["base", "soft", "hard", "ssot"]
    assert Titles({}, {}, ("hard",)).shown(a, b) == ["hard"]


def test_the_condition_sentence_of_every_caption():
    assert join_words(["a"]) == "a" and join_words(["a", "b"]) == "a and b"
    assert join_words(["a", "b", "c"]) == "a, b, and c"
    sentence = TITLES.sentence(["base", "soft", "hard"])
    assert sentence == (
        "Base denotes the original checkpoint, Soft the soft-target Calibration Fine-Tuning checkpoint, and Hard "
        "the hard-target Calibration Fine-Tuning checkpoint."
    )
    assert Titles({}, {}).sentence(["soft_d2"]) == "soft_d2 the soft_d2 checkpoint."
    assert TITLES.sentence([]) == ""


def test_runs_by_split_take_the_files_split_after_split(tmp_path):
    runs = [["m", "base"], ["m", "soft"]]
    paths = []
    for split in ("ood", "unseen"):
        for _, cond in runs:
            path = tmp_path / f"{split}-{cond}.json"
            path.write_text(f'{{"split": "{split}", "condition": "{cond}"}}')
            paths.append(str(path))
    by_split = read_runs_by_split(paths, ["ood", "unseen"], runs)
    assert {s: {c: r["split"] + r["condition"] for c, r in by_split[s]["m"].items()} for s in by_split} == {
        "ood": {"base": "oodbase", "soft": "oodsoft"},
        "unseen": {"base": "unseenbase", "soft": "unseensoft"},
    }
    with pytest.raises(ValueError, match="3 files for 2 splits of 2 runs"):
        read_runs_by_split(paths[:3], ["ood", "unseen"], runs)


# ---------------------------------------------------------------------------------------------- intervals


def block(draws, seed=7, units=None, level=0.95, resampled="items"):
    """A run's `intervals` as an evaluation writes them, every metric's replicates kept."""
    arrays = {key: np.asarray(values, dtype=float) for key, values in draws.items()}
    return interval_block(arrays, seed, resampled, level, kept=list(arrays), units=units or {"task": 4})


def test_run_interval_is_the_runs_own_interval_or_none():
    runs = {
        "m1": {"base": {"intervals": {"tv": [0.1, 0.3]}}, "soft": {"tv": 0.2}},  # soft: no intervals
        "m2": {"base": {"intervals": None}},
    }
    assert run_interval(runs, "m1", "base", "tv") == [0.1, 0.3]
    assert run_interval(runs, "m1", "base", "parse_rate") is None  # a key the run has no interval of
    assert run_interval(runs, "m1", "soft", "tv") is None
    assert run_interval(runs, "m1", "hard", "tv") is None  # not run
    assert run_interval(runs, "m3", "base", "tv") is None  # unknown model
    assert run_interval(runs, "m2", "base", "tv") is None
    frame = run_intervals(runs, ["m1", "m2"], ["base", "soft"], "tv")
    assert frame.shape == (2, 2) and list(frame.index) == ["m1", "m2"] and list(frame.columns) == ["base", "soft"]
    assert frame.loc["m1", "base"] == [0.1, 0.3]
    assert frame.loc["m1", "soft"] is None and frame.loc["m2", "base"] is None and frame.loc["m2", "soft"] is None


def test_mean_interval_is_the_percentile_interval_of_the_mean_of_paired_replicates():
    a = np.arange(40, dtype=float)  # replicate i of model a: i
    b = 39.0 - a  # model b's replicates run the other way: every mean of replicate i is 19.5
    c = (a * 7) % 40  # a permutation: its own interval is a's
    runs = {"a": {"base": {"intervals": block({"x": a})}}, "b": {"base": {"intervals": block({"x": b})}}}
    runs["c"] = {"base": {"intervals": block({"x": c})}}
    # paired, the anti-correlated replicates cancel: the mean's interval is a point, not the mean of the intervals
    assert mean_interval(runs, ["a", "b"], "base", "x") == pytest.approx([19.5, 19.5])
    mean = (a + c) / 2
    want = [float(np.quantile(mean, 0.025)), float(np.quantile(mean, 0.975))]
    assert mean_interval(runs, ["a", "c"], "base", "x") == pytest.approx(want)
    assert want != pytest.approx(runs["a"]["base"]["intervals"]["x"])  # the inputs tell the two apart
    # one model alone: its own interval
    assert mean_interval(runs, ["a"], "base", "x") == pytest.approx(runs["a"]["base"]["intervals"]["x"])


def test_mean_interval_skips_undefined_replicates_and_keeps_the_level():
    a = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, 7.0, 8.0])
    b = np.array([2.0, 2.0, 3.0, np.nan, 1.0, 0.0, 3.0, 1.0])
    runs = {m: {"base": {"intervals": block({"x": v}, level=0.5)}} for m, v in (("a", a), ("b", b))}
    defined = np.array([1.5, 2.0, 3.0, 3.0, 5.0, 4.5])  # replicates 2 and 3 undefined in one model
    want = [float(np.quantile(defined, 0.25)), float(np.quantile(defined, 0.75))]  # the runs' level, 0.5
    assert mean_interval(runs, ["a", "b"], "base", "x") == pytest.approx(want)


def test_mean_interval_is_none_without_every_models_paired_replicates():
    draws = np.linspace(0.0, 1.0, 20)
    runs = {
        "a": {"base": {"intervals": block({"x": draws})}, "soft": {"intervals": block({"x": draws})}},
        "b": {"base": {"intervals": block({"x": draws[::-1]})}},  # no soft run
        "no_draws": {"base": {"intervals": {k: v for k, v in block({"x": draws}).items() if k != "draws"}}},
        "no_intervals": {"base": {"x": 0.5}},
        "seed": {"base": {"intervals": block({"x": draws}, seed=8)}},
        "units": {"base": {"intervals": block({"x": draws}, units={"task": 5})}},
        "replicates": {"base": {"intervals": block({"x": draws[:10]})}},
        "resampled": {"base": {"intervals": block({"x": draws}, resampled="documents")}},
        "other_key": {"base": {"intervals": block({"y": draws})}},
    }
    assert mean_interval(runs, ["a", "b"], "base", "x") is not None  # paired: defined
    assert mean_interval(runs, ["a", "b"], "soft", "x") is None  # b lacks the run
    assert mean_interval(runs, ["a", "missing"], "base", "x") is None  # a model without any run
    for other in ("no_draws", "no_intervals", "seed", "units", "replicates", "resampled", "other_key"):
        assert mean_interval(runs, ["a", other], "base", "x") is None, other
    assert mean_interval(runs, [], "base", "x") is None
