"""The reproduction report's comparison and verdicts (calibft.artifacts.reproduction)."""

import io
import json
import math
from decimal import Decimal

import pandas as pd
import pytest

from calibft.artifacts.reference import ReferenceCell, compared_rows
from calibft.artifacts.registry import ARTIFACTS, where
from calibft.artifacts.reproduction import (
    compare,
    informative,
    not_informative,
    recorded_reference,
    recording_machine,
    scatter,
    table_cells,
    verdict,
    verdict_counts,
    widened_reference,
)
from calibft.artifacts.tables import Table

NAN = math.nan


@pytest.mark.parametrize(
    ("reference", "tolerance", "ours", "low", "high", "expected"),
    [
        (0.30, 0.005, 0.31, 0.29, 0.33, "within"),
        (0.287, 0.005, 0.31, 0.29, 0.33, "within"),  # outside the interval by less than the paper's rounding
        (0.28, 0.005, 0.31, 0.29, 0.33, "outside"),
        (0.334, 0.005, 0.31, 0.29, 0.33, "within"),
        (0.34, 0.005, 0.31, 0.29, 0.33, "outside"),
        (0.4, 0.005, 1e25, 1e20, 1e30, "outside"),  # a wide interval far off: its size widens nothing at 0.4
        (0.34, 0.0, 0.31, 0.29, 0.33, "outside"),
        (None, None, 0.31, 0.29, 0.33, "no reference"),  # the paper prints "---"
        (0.30, 0.005, NAN, NAN, NAN, "not run"),
        (0.30, 0.005, 0.31, NAN, NAN, "no interval"),
    ],
)
def test_verdicts_by_hand(reference, tolerance, ours, low, high, expected):
    assert verdict(reference, tolerance, ours, low, high) == expected


# Interval edges and tolerances in decimal, as tables and the paper print them: every edge from 0.100 to 1.999 by
# 0.001 with half a unit of the last of 2 to 4 decimals (3 to 5 significant digits), and the same times 10 and 1000
EDGES = [
    (Decimal(k) / 1000 * scale, Decimal(5) / 10**d * scale)
    for k in range(100, 2000)
    for d in (3, 4, 5)
    for scale in (1, 10, 1000)
]


def test_a_reference_exactly_at_the_widened_edge_is_within_whichever_way_floats_round():
    """A reference exactly at our interval's edge widened by its tolerance (the paper's 0.29 against our interval
    ending at 0.285) reads within at both edges, and one a thousandth of the tolerance beyond reads outside, for
    every edge and tolerance of EDGES: the verdict does not hang on how the decimals round to floats."""
    flips = 0
    for edge, tolerance in EDGES:
        low, high = float(edge), float(edge + 1)
        below, above = edge - tolerance, edge + 1 + tolerance  # exactly at the widened edges
        beyond = tolerance / 1000
        for reference in (below, above):
            assert verdict(float(reference), float(tolerance), low, low, high) == "within", (reference, edge)
        for reference in (below - beyond, above + beyond):
            assert verdict(float(reference), float(tolerance), low, low, high) == "outside", (reference, edge)
        flips += not float(below) >= low - float(tolerance) or not float(above) <= high + float(tolerance)
    # the plain float test reads some of these edges outside (IEEE-754 rounding, the same on every machine): the
    # cases above do exercise the boundary
    assert flips > 100


def grouped():
    """A two-model table as the structured renderers build it: Model, then Group / Condition columns."""
    columns = pd.MultiIndex.from_tuples([("", "Model"), ("OOD W₁ ↓", "Base"), ("OOD W₁ ↓", "Soft")])
    frame = pd.DataFrame([["Qwen3-0.6B", 0.46, 0.2], ["Qwen3-1.7B", 0.36, NAN]], columns=columns)
    intervals = pd.DataFrame([[None, [0.44, 0.48], [0.19, 0.22]], [None, None, None]], columns=columns, dtype=object)
    return Table(frame, "tab:main-ood", intervals=intervals)


def cell(row, column, printed, value, tolerance, panel=""):
    return ReferenceCell("main_ood", panel, "", row, column, printed, value, tolerance, False)


def test_each_reference_cell_meets_ours():
    ours = table_cells(grouped())
    assert list(ours["column"]) == ["OOD W₁ ↓ / Base", "OOD W₁ ↓ / Soft"] * 2
    reference = [
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Base", "0.462", 0.462, 0.0005),
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Soft", "170.423", 170.423, 0.0005),
        cell("Qwen3-1.7B", "OOD W₁ ↓ / Base", "0.3574", 0.3574, 0.00005),
        cell("Qwen3-1.7B", "OOD W₁ ↓ / Soft", "---", None, None),
        cell("Gemma-3-1B-it", "OOD W₁ ↓ / Base", "96.9663", 96.9663, 0.00005),
    ]
    result = compare(reference, ours, "release")
    assert list(result["verdict"]) == ["within", "outside", "no interval", "no reference", "not run"]
    assert result["difference"].iloc[0] == pytest.approx(0.46 - 0.462)
    assert (result["protocol"] == "release").all()
    counts = verdict_counts({"main_ood": result}).iloc[0]
    assert (counts["within"], counts["outside"], counts["not run"], counts["cells"]) == (1, 1, 1, 5)


def test_the_scatter_draws_our_interval_and_the_reference_tolerance():
    """A wide tolerance makes a reference far from our interval `within`: its horizontal bar shows why."""
    reference = [
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Base", "0.52", 0.52, 0.05),  # our [0.44, 0.48] widened by 0.05: within
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Soft", "0.3", 0.3, None),  # no tolerance: outside [0.19, 0.22]
    ]
    comparison = compare(reference, table_cells(grouped()), "release")
    assert list(comparison["verdict"]) == ["within", "outside"]
    figure = scatter(comparison, "main_ood")
    bars = {}
    for container in figure.axes[0].containers:
        horizontal, vertical = container.lines[2]
        bars[container.get_label()] = (horizontal.get_segments()[0], vertical.get_segments()[0])
    (x_within, y_within), (x_outside, _) = bars["within"], bars["outside"]
    assert x_within[:, 0] == pytest.approx([0.47, 0.57]) and y_within[:, 1] == pytest.approx([0.44, 0.48])
    assert x_outside[:, 0] == pytest.approx([0.3, 0.3])


def test_a_two_panel_cell_is_matched_on_its_panel():
    frame = pd.DataFrame({"Model": ["M"], "PALOMA Perplexity ↓ / Base": [12.0]})
    reference = [cell("M", "Base", "12", 12.0, 0.5, panel="PALOMA Perplexity ↓")]
    result = compare(reference, table_cells(Table(frame, "tab:paloma-model-summary")), "release")
    assert list(result["verdict"]) == ["no interval"] and result["ours"].iloc[0] == 12.0


def test_a_header_without_its_group_meets_our_only_column_of_that_header():
    frame = pd.DataFrame({"Model / Task": ["MMLU"], "TinyBenchmarks gp-IRT ↑ / Base": [0.45]})
    reference = [ReferenceCell("retention_summary", "", "", "MMLU", "Base", "0.456", 0.456, 0.0005, False)]
    result = compare(reference, table_cells(Table(frame, "tab:retention-summary")), "release")
    assert result["ours"].iloc[0] == 0.45 and result["column"].iloc[0] == "Base"


def test_a_recorded_run_is_its_own_reference():
    frame = pd.DataFrame({"Model": ["Tiny"], "A / Base": [0.1234567891], "A / Soft": [NAN]})
    cells = recorded_reference({"main_ood": frame})
    assert [(c.printed, c.value, c.tolerance) for c in cells] == [
        ("0.1234567891", 0.1234567891, 0.0),
        ("---", None, 0.0),
    ]


def test_a_recorded_numbers_tolerance_is_its_largest_deviation_over_other_runs():
    recorded = pd.DataFrame({"Model": ["Tiny", "Other"], "A / Base": [0.5, 0.25]})
    runs = [
        {"main_ood": pd.DataFrame({"Model": ["Tiny"], "A / Base": [0.625]})},
        {"main_ood": pd.DataFrame({"Model": ["Tiny"], "A / Base": [0.25]})},  # the largest: 0.25 away
        {"main_unseen": pd.DataFrame({"Model": ["Tiny"], "A / Base": [9.0]})},
    ]
    cells = recorded_reference({"main_ood": recorded}, runs)
    assert [(c.row, c.tolerance) for c in cells] == [("Tiny", 0.25), ("Other", 0.0)]
    # a number of our run 0.2 away, whose interval misses the reference by 0.1, is within the tolerance
    assert verdict(cells[0].value, cells[0].tolerance, 0.7, 0.6, 0.8) == "within"


def test_widening_a_recorded_reference_keeps_its_values_and_takes_the_larger_deviation():
    recorded = recorded_reference(
        {"main_ood": pd.DataFrame({"Model": ["Tiny", "Other", "Gone"], "A / Base": [0.5, 0.25, NAN]})},
        [{"main_ood": pd.DataFrame({"Model": ["Tiny", "Other"], "A / Base": [0.75, 0.375]})}],
    )
    assert [c.tolerance for c in recorded] == [0.25, 0.125, 0.0]  # binary fractions: exact differences
    runs = [
        {"main_ood": pd.DataFrame({"Model": ["Tiny", "Other", "Gone"], "A / Base": [0.625, 0.75, 1.0]})},
        {"main_ood": pd.DataFrame({"Model": ["Tiny"], "A / Base": [NAN]})},  # no number: no deviation
    ]
    widened = widened_reference(recorded, runs)
    assert [(c.row, c.value, c.tolerance) for c in widened] == [
        ("Tiny", 0.5, 0.25),  # its own tolerance (0.25) is larger than the new run's deviation (0.125)
        ("Other", 0.25, 0.5),  # the new run lies 0.5 away
        ("Gone", None, 0.0),  # a "---" stays one
    ]


def test_an_ablation_row_is_keyed_by_its_settings_within_its_model_block():
    frame = pd.DataFrame(
        {"Model": ["Qwen3-14B", "Qwen3-14B"], "d": [2, 3], "max bins": [1001.0, 1001.0], "OOD W₁ ↓": [0.12, 0.11]}
    )
    intervals = pd.DataFrame([[None, None, None, [0.1, 0.13]], [None, None, None, None]], dtype=object)
    ours = table_cells(Table(frame, "tab:grid-ablation", intervals=intervals))
    assert list(ours["block"]) == ["Qwen3-14B"] * 2
    assert list(ours["row"]) == ["d=2, max bins=1001", "d=3, max bins=1001"]
    reference = [
        ReferenceCell("grid_ablation", "", "Qwen3-14B", "d=2, max bins=1001", "OOD W₁ ↓", "0.119", 0.119, 5e-4, False),
        ReferenceCell("grid_ablation", "", "Gemma-3-12B-it", "d=2, max bins=1001", "OOD W₁ ↓", "0.2", 0.2, 5e-4, False),
    ]
    result = compare(reference, ours, "release")
    assert list(result["verdict"]) == ["within", "not run"] and result["ours"].iloc[0] == 0.12
    assert compared_rows(ARTIFACTS, reference) == where(name="grid_ablation")


@pytest.mark.parametrize(
    ("reference", "tolerance", "expected"),
    [
        (0.47, 447.0, False),  # the demo's recorded OOD W1 whose deviation over six runs reached 447
        (0.47, 0.47, False),  # from zero to twice the number: the bound of the rule
        (-0.47, 0.5, False),
        (0.47, 0.4699, True),
        (0.47, 0.0, True),
        (0.47, None, True),
        (0.0, 0.0, True),  # a recorded 0 asks for 0
        (0.0, 0.0005, True),  # the paper's 0.0%: below 0.05%
        (None, None, False),  # "---": no number to compare
        (math.nan, 0.1, False),  # as a comparison's .csv reads "---" back
    ],
)
def test_a_cell_is_informative_where_its_tolerance_is_smaller_than_the_reference(reference, tolerance, expected):
    assert informative(reference, tolerance) is expected


def test_cells_whose_tolerance_exceeds_the_reference_are_counted_apart():
    """Three cells within, one of them 0.47 with a tolerance of 447, which would read within for any number of
    ours below 447: the counts take two informative cells within and name the third apart."""
    reference = [
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Base", "0.45", 0.45, 0.01),
        cell("Qwen3-0.6B", "OOD W₁ ↓ / Soft", "0.47", 0.47, 447.0),  # our [0.19, 0.22] is far below 0.47
        cell("Qwen3-0.6B", "Base", "0.46", 0.46, 0.0),
        cell("Qwen3-1.7B", "OOD W₁ ↓ / Soft", "---", None, None),
    ]
    comparison = compare(reference, table_cells(grouped()), "release")
    assert list(comparison["verdict"]) == ["within", "within", "within", "no reference"]
    assert list(comparison["informative"]) == [True, False, True, False]
    counts = verdict_counts({"main_ood": comparison}).iloc[0]
    assert (counts["within"], counts["informative within"], counts["not informative"]) == (3, 2, 1)
    assert list(not_informative(comparison)["column"]) == ["OOD W₁ ↓ / Soft"]
    # the same from the comparison's .csv, as rule reproduction_summary reads it back
    written = pd.read_csv(io.StringIO(comparison.to_csv(index=False)))
    assert verdict_counts({"main_ood": written}).iloc[0].to_dict() == counts.to_dict()


@pytest.mark.parametrize("several_seeds", [False, True])
def test_the_recording_machine_reads_the_seeds_of_the_runs_evaluations(tmp_path, several_seeds):
    for seed in (11, 12) if several_seeds else (11,):
        run = tmp_path / f"seeds/{seed}" if several_seeds else tmp_path
        metrics = run / "eval/tiny/base/structured/ood/metrics.json"
        metrics.parent.mkdir(parents=True)
        metrics.write_text(json.dumps({"job": {"seed": seed}}))
    (tmp_path / "tables").mkdir()
    assert recording_machine(tmp_path / "tables")["seeds"] == ([11, 12] if several_seeds else [11])
