"""A table over several seeds (calibft.artifacts.seed_tables) on hand-computed cases, and how its files show
it."""

import math

import pandas as pd
import pytest

from calibft.artifacts.registry import Artifact
from calibft.artifacts.seed_tables import combine_seeds, render_artifact
from calibft.artifacts.tables import Table, to_csv, to_latex, to_markdown


def seed_table(w1: list[float], bold: list[bool], intervals: list, valid: list[float] | None = None) -> Table:
    frame = pd.DataFrame({"Model": ["A", "B"], "W1": w1, "Valid": valid or [0.5, 0.5]})
    return Table(
        frame,
        "tab:main-ood",
        "Caption.",
        formats={"W1": ".2f"},
        bold=pd.DataFrame({"Model": [False, False], "W1": bold, "Valid": [False, False]}),
        intervals=pd.DataFrame({"Model": [None, None], "W1": intervals, "Valid": [None, None]}, dtype=object),
    )


SEED_11 = seed_table([1.0, 0.25], [True, True], [[0.5, 1.5], None])
SEED_12 = seed_table([3.0, math.nan], [True, False], [[2.75, 3.25], None])


def test_numbers_are_the_seeds_mean_with_their_standard_deviation():
    table = combine_seeds([SEED_11, SEED_12], [11, 12])
    assert table.frame["W1"].iloc[0] == 2.0 and table.spread["W1"].iloc[0] == pytest.approx(math.sqrt(2))
    assert math.isnan(table.frame["W1"].iloc[1])  # undefined in one seed: undefined
    assert list(table.frame["Model"]) == ["A", "B"] and table.spread["Model"].isna().all()
    assert list(table.frame["Valid"]) == [0.5, 0.5] and list(table.spread["Valid"]) == [0.0, 0.0]
    assert table.caption == (
        "Caption. Mean over seeds 11 and 12 ± their standard deviation; bold where every seed's table is bold."
    )


def test_bold_where_every_seed_bolds_and_intervals_cover_every_seed():
    table = combine_seeds([SEED_11, SEED_12], [11, 12])
    assert list(table.bold["W1"]) == [True, False]
    assert table.intervals["W1"].iloc[0] == [0.5, 3.25]  # the lowest and highest bound of the seeds' intervals
    assert table.intervals["W1"].iloc[1] is None  # undefined in one seed
    assert table.intervals["Valid"].iloc[0] == [0.5, 0.5]  # no bootstrap interval: the seeds' values
    assert table.intervals["Model"].iloc[0] is None


def test_a_seed_without_an_interval_widens_the_others_with_its_value():
    low = seed_table([0.125, 1.0], [False, False], [None, None])
    table = combine_seeds([SEED_11, low], [11, 13])
    assert table.intervals["W1"].iloc[0] == [0.125, 1.5]


def test_text_that_differs_between_seeds_is_an_error():
    other = seed_table([1.0, 1.0], [False, False], [None, None])
    other = Table(other.frame.assign(Model=["A", "C"]), other.label)
    with pytest.raises(ValueError, match="column 'Model' holds text that differs between seeds 11 and 12"):
        combine_seeds([SEED_11, other], [11, 12])


def test_tables_of_different_shapes_are_an_error():
    shorter = Table(SEED_12.frame.iloc[:1], SEED_12.label)
    with pytest.raises(ValueError, match=r"the table of seed 12 has shape \(1, 3\), not \(2, 3\)"):
        combine_seeds([SEED_11, shorter], [11, 12])


def test_the_files_show_mean_and_spread():
    table = combine_seeds([SEED_11, SEED_12], [11, 12])
    markdown = to_markdown(table)
    assert "| A | **2.00 ± 1.41** | 0.5 ± 0 |" in markdown and "| B | --- | 0.5 ± 0 |" in markdown
    csv = to_csv(table).splitlines()
    assert csv[0] == "Model,W1,W1 sd,Valid,Valid sd"
    assert csv[1].startswith("A,2.0,1.414213562373")
    assert r"\textbf{2.00 \ensuremath{\pm} 1.41}" in to_latex(table)


def test_one_seed_writes_the_tables_files_unchanged():
    assert to_csv(SEED_11).splitlines()[0] == "Model,W1,Valid" and "±" not in to_markdown(SEED_11)


def render_seed(inputs, settings):
    """A renderer for the test: the W1 of each seed's file."""
    return seed_table([float(inputs["structured"][0]), 1.0], [False, False], [None, None])


ROW = Artifact("main_ood", "table", "tab:main-ood", "test", ("structured",), f"{__name__}:render_seed", "test")


def test_render_artifact_renders_once_per_seed():
    assert render_artifact(ROW, [{"structured": ["4"]}], {"seeds": [11]}).frame["W1"].iloc[0] == 4.0
    combined = render_artifact(ROW, [{"structured": ["4"]}, {"structured": ["2"]}], {"seeds": [11, 12]})
    assert combined.frame["W1"].iloc[0] == 3.0 and combined.intervals["W1"].iloc[0] == [2.0, 4.0]
