import math

import pytest

from calibft.artifacts.runs import condition_sentence, conditions_of, first_seen, join_words, number, read_runs_by_split

TITLES = {"base": "Base", "soft": "Soft", "hard": "Hard"}


def test_number_is_nan_where_undefined():
    assert number(2) == 2.0 and math.isnan(number(None)) and math.isnan(number(float("inf")))


def test_models_and_conditions_in_order_of_first_appearance():
    a = {"m1": {"base": {}, "soft": {}}, "m2": {"hard": {}}}
    b = {"m3": {"soft": {}, "ssot": {}}, "m1": {}}
    assert first_seen(a, b) == ["m1", "m2", "m3"]
    assert conditions_of(None, a, b) == ["base", "soft", "hard", "ssot"]
    assert conditions_of(["hard"], a, b) == ["hard"]


def test_the_condition_sentence_of_every_caption():
    assert join_words(["a"]) == "a" and join_words(["a", "b"]) == "a and b"
    assert join_words(["a", "b", "c"]) == "a, b, and c"
    sentence = condition_sentence(["base", "soft", "hard"], TITLES)
    assert sentence == (
        "Base denotes the original checkpoint, Soft the soft-target Calibration Fine-Tuning checkpoint, and Hard "
        "the hard-target Calibration Fine-Tuning checkpoint."
    )
    assert condition_sentence(["soft_d2"], {}) == "soft_d2 the soft_d2 checkpoint."
    assert condition_sentence([], TITLES) == ""


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
