from collections import Counter

import pytest

from calibft.artifacts.figures import save_figure
from calibft.artifacts.open_ended import (
    answer_counts,
    open_multi_threshold_figure,
    open_qualitative_figure,
    top_labels,
)
from calibft.artifacts.runs import Titles

TITLES = Titles({}, {"base": "Base", "soft": "Soft", "hard": "Hard"})
PROMPTS = [f"Name a random thing {i}. Output ONLY the answer." for i in range(4)]


def run(condition, supports, uniques, prompts=PROMPTS, headline=0.9):
    """A metrics.json of one (model, condition) with the given per-prompt values."""
    rows = [
        {"prompt_index": i, "prompt": p, "samples": 100, "support": s, "unique_fraction": u}
        for i, (p, s, u) in enumerate(zip(prompts, supports, uniques, strict=True))
    ]
    return {
        "model": "m",
        "condition": condition,
        "thresholds": [0.5, 0.9],
        "headline_threshold": headline,
        "aggregate": {},
        "prompts": rows,
    }


def metrics():
    """Two models; the second has no hard run. Increases (strict) per panel, hand-counted:
    support/soft: q 2 (3 > 1, 9 > 4; 2 = 2 and 1 < 5 are not) + g 1 = 3 of 8;
    support/hard: q 3 of 4; unique/soft: q 1 (0.5 > 0.1) of 3 defined + g 4 of 4 = 5 of 7;
    unique/hard: q 2 of 3 defined (the baseline's None leaves prompt 2 out)."""
    return {
        "q": {
            "base": run("base", [1, 2, 4, 5], [0.1, 0.2, None, 0.4]),
            "soft": run("soft", [3, 2, 9, 1], [0.5, 0.2, 0.7, 0.3]),
            "hard": run("hard", [2, 3, 5, 5], [0.2, 0.3, 0.9, 0.4]),
        },
        "g": {
            "base": run("base", [10, 10, 10, 10], [0.0, 0.0, 0.0, 0.0]),
            "soft": run("soft", [11, 10, 9, 10], [0.1, 0.2, 0.3, 0.4]),
        },
    }


def multi(runs, sizes=None, families=None):
    return open_multi_threshold_figure(
        runs,
        Titles({"q": "Qwen3-0.6B", "g": "Gemma"}, TITLES.condition_titles),
        families or {"q": "Qwen", "g": "Gemma"},
        sizes or {"q": 0.6, "g": None},
    )


# ---------------------------------------------------------------------------------------------- top_labels


def test_top_labels_cuts_each_state_to_per_state():
    # frequencies: d, e 1/2; a 5/12, b 4/12, c 3/12 ; c is left out by the cut alone
    counts = {"base": {"a": 5, "b": 4, "c": 3}, "soft": {"d": 1, "e": 1}}
    assert top_labels(counts, per_state=2) == ["d", "e", "a", "b"]
    assert top_labels(counts, per_state=1) == ["d", "a"]
    assert top_labels(counts) == ["d", "e", "a", "b", "c"]


def test_top_labels_ranks_by_peak_then_total_frequency():
    # (base, soft) frequencies: u (.4, 0), v (.4, .1), w (.2, .4), x (0, .5)
    counts = {"base": {"u": 4, "v": 4, "w": 2}, "soft": {"v": 1, "w": 4, "x": 5}}
    assert top_labels(counts) == ["x", "w", "v", "u"]
    assert top_labels(counts, shown=2) == ["x", "w"]


def test_top_labels_breaks_ties_by_text():
    counts = {"base": {"b": 1, "c": 1, "a": 1}, "soft": {"c": 2, "b": 2, "a": 2}}
    assert top_labels(counts) == ["a", "b", "c"]
    assert top_labels({"base": {"b": 1, "c": 1, "a": 1}}, per_state=2) == ["a", "b"]


def test_top_labels_excludes_empty_answers_before_the_cut():
    assert top_labels({"base": {"": 50, "a": 1, "b": 1}}, per_state=1) == ["a"]
    assert top_labels({"base": {"": 3}}) == []


def test_top_labels_uses_each_states_own_total():
    # a: 30 of 100 = 0.3; b: 5 of 10 = 0.5, although 5 < 30 samples
    counts = {"base": Counter({"a": 30, "": 70}), "soft": Counter({"b": 5, "": 5})}
    assert top_labels(counts) == ["b", "a"]


# ---------------------------------------------------------------------------------------------- answer_counts


def test_answer_counts_counts_one_prompts_answers_with_empty_ones():
    records = [
        {"prompt": "p", "normalized": "Paris"},
        {"prompt": "q", "normalized": "Paris"},
        {"prompt": "p", "normalized": ""},
        {"prompt": "p", "normalized": "Paris"},
        {"prompt": "p", "normalized": "Rome"},
    ]
    counts = answer_counts(records, "p")
    assert counts == Counter({"Paris": 2, "": 1, "Rome": 1})
    assert counts.total() == 4
    with pytest.raises(ValueError, match="no sample"):
        answer_counts(records, "r")


# ---------------------------------------------------------------------------------------------- multi-threshold


def test_multi_threshold_titles_count_strict_increases():
    figure = multi(metrics())
    assert [ax.get_title() for ax in figure.axes] == [
        "Soft: support up on 3/8 pairs",
        "Hard: support up on 3/4 pairs",
        "Soft: unique rate up on 5/7 pairs",
        "Hard: unique rate up on 2/3 pairs",
    ]
    assert figure.axes[0].get_xscale() == "log" and figure.axes[2].get_xscale() == "linear"
    assert figure.axes[2].get_xlabel() == "Base: unique output rate (%)"
    assert figure.axes[1].get_ylabel() == "Hard: top-90% first-token support"


def test_multi_threshold_legends_families_and_sizes_in_ascending_order():
    runs = metrics()
    runs["l"] = runs.pop("q")
    sizes = {"l": 8.0, "g": 0.6, "n": None}
    runs["n"] = runs["g"]
    figure = multi(runs, sizes=sizes, families={"l": "Llama", "g": "Gemma", "n": "Gemma"})
    families, size_legend = figure.legends
    assert [t.get_text() for t in families.get_texts()] == ["Gemma", "Llama"]
    assert [t.get_text() for t in size_legend.get_texts()] == ["0.6B", "8B", "size unknown"]
    markers = [h.get_marker() for h in size_legend.legend_handles]
    assert len(set(markers)) == 3


def test_multi_threshold_errors():
    runs = metrics()
    del runs["g"]["base"]
    with pytest.raises(ValueError, match="Gemma"):
        multi(runs)

    runs = metrics()
    runs["g"]["soft"] = run("soft", [1, 1, 1, 1], [0.1] * 4, prompts=[*PROMPTS[:3], "Pick a random bird."])
    with pytest.raises(ValueError, match="prompt 3"):
        multi(runs)

    runs = metrics()
    runs["g"]["soft"] = run("soft", [1, 1, 1], [0.1] * 3, prompts=PROMPTS[:3])
    with pytest.raises(ValueError, match="prompt indices"):
        multi(runs)

    runs = metrics()
    runs["g"]["soft"]["headline_threshold"] = 0.5
    with pytest.raises(ValueError, match="headline threshold"):
        multi(runs)

    with pytest.raises(ValueError, match="no condition"):
        multi({"q": {"base": metrics()["q"]["base"]}})


# ---------------------------------------------------------------------------------------------- qualitative

CITY = "Name a random city. Output ONLY the answer."
LONG = "Tell me any word at all that comes to your mind right now, please."


def qualitative_panels():
    city = {"base": Counter({"Paris": 3, "": 1}), "soft": Counter({"Paris": 1, "Rome": 1})}
    long_labels = {"base": Counter({"Llanfairpwllgwyngyll station": 2}), "soft": Counter({"x": 1})}
    return [("Qwen", CITY, city), ("Qwen", LONG, long_labels), ("Gemma", CITY, city)]


def test_qualitative_layout_titles_labels_and_frequencies():
    figure = open_qualitative_figure(qualitative_panels(), TITLES)
    city, long, gemma_city, gemma_long = figure.axes
    assert city.get_title() == "Qwen: city"
    assert long.get_title() == "Qwen: Tell me any word at all that comes to yo…"
    assert gemma_city.get_title() == "Gemma: city" and not gemma_long.get_visible()
    assert [t.get_text() for t in city.get_yticklabels()] == ["Paris", "Rome"]
    assert [t.get_text() for t in long.get_yticklabels()] == ["Llanfairpwllgwyngy…", "x"]
    # base: Paris 3 of 4 (the empty answer counts), Rome 0; soft: 1 of 2 each
    assert [p.get_width() for p in city.patches] == [0.75, 0.0, 0.5, 0.5]
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["Base", "Soft"]


def test_qualitative_errors():
    with pytest.raises(ValueError, match="no panels"):
        open_qualitative_figure([], TITLES)
    panels = qualitative_panels()
    with pytest.raises(ValueError, match="two panels"):
        open_qualitative_figure([*panels, panels[0]], TITLES)


def test_figures_save(tmp_path):
    for name, figure in (
        ("appendix_open_multi_threshold", multi(metrics())),
        ("appendix_open_qualitative", open_qualitative_figure(qualitative_panels(), TITLES)),
    ):
        pdf, png = save_figure(figure, name, tmp_path)
        assert pdf == tmp_path / f"{name}.pdf" and pdf.stat().st_size > 0
        assert png == tmp_path / f"{name}.png" and png.stat().st_size > 0


def test_panels_are_named_by_the_category_of_the_authors_prompt_forms():
    from calibft.artifacts.open_ended import _prompt_name

    assert _prompt_name("Think of a random mammal. Output ONLY the answer.") == "mammal"
    assert _prompt_name("Choose a random piece of clothing. Output ONLY the answer.") == "piece of clothing"
    assert (
        _prompt_name("Write a haiku about a whale and a walnut tree, please.")
        == "Write a haiku about a whale and a walnut…"
    )
