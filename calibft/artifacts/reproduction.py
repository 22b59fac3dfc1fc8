"""Did it reproduce? Each number of a table next to the reference's (the paper's, `reference/paper.csv`, or a
recorded run's), with our interval, the difference and a verdict.

A verdict per reference cell:

- `within`: the reference lies in our interval, widened by the reference's tolerance (the paper's rounding,
  or a recorded run's run-to-run deviation);
- `outside`: it does not;
- `no interval`: our number has no interval (an evaluation whose tables carry none yet);
- `no reference`: the reference prints no number ("---", undefined there);
- `not run`: our table has no number for the cell (a model or condition this config does not run, or an
  undefined aggregate).

A cell whose reference carries a tolerance at least as large as the reference itself is not informative
(`informative`): its widened interval reaches from zero to twice the number, so its verdict says next to nothing
about ours. The counts name such cells apart (`verdict_counts`).

Each row states the protocol (`calibft.core.protocol`) that produced our numbers.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from calibft.artifacts.figures import plt, save_figure
from calibft.artifacts.reference import ReferenceCell, is_value_column
from calibft.artifacts.registry import Artifact
from calibft.artifacts.seed_tables import render_artifact
from calibft.artifacts.tables import Table, flat_names, write_table
from calibft.core.provenance import cpu_pins, git_state, package_versions

VERDICTS = ("within", "outside", "no interval", "no reference", "not run")
COLUMNS = [
    "block",
    "row",
    "column",
    "reference",
    "reference_value",
    "tolerance",
    "ours",
    "low",
    "high",
    "difference",
    "verdict",
    "informative",
    "protocol",
]


CELL_COLUMNS = ["block", "row", "column", "value", "low", "high"]


def _key_text(value: object) -> str:
    """A key cell as the paper prints it: a whole number without its `.0`."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def cells(frame: pd.DataFrame, intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """A table's numbers in the reference's terms (`CELL_COLUMNS`), from a frame with flat `Group / Header`
    column names: the columns of numbers are the conditions and the metrics with an arrow; the others key the
    rows. With one key column it is the `row`; with more, the first is the `block` (an ablation table's model)
    and the others make the row, `header=value` each."""
    names = list(frame.columns)
    values = [j for j, name in enumerate(names) if is_value_column(*name.rpartition(" / ")[::2])]
    keys = [j for j in range(len(names)) if j not in values]
    block, row_keys = (keys[0], keys[1:]) if len(keys) > 1 else (None, keys)
    found = []
    for i in range(len(frame)):
        texts = {j: _key_text(frame.iat[i, j]) for j in keys}
        row = texts[row_keys[0]] if len(row_keys) == 1 else ", ".join(f"{names[j]}={texts[j]}" for j in row_keys)
        for j in values:
            value = frame.iat[i, j]
            span = None if intervals is None else intervals.iat[i, j]
            low, high = span if span is not None else (math.nan, math.nan)
            number = math.nan if value is None or pd.isna(value) else float(value)
            found.append(["" if block is None else texts[block], row, names[j], number, low, high])
    return pd.DataFrame(found, columns=CELL_COLUMNS)


def table_cells(table: Table) -> pd.DataFrame:
    """`cells` of a rendered table, with its intervals."""
    frame = table.frame.copy()
    frame.columns = flat_names(table.frame)
    return cells(frame, table.intervals)


# How far past the widened interval's edge a reference still reads within, relative to the largest magnitude
# compared at that edge. A reference exactly at the edge is within: the paper's 0.29 stands for any number from
# 0.285 to 0.295, so it reproduces our interval ending at 0.285. But the numbers reach the comparison through float
# arithmetic (the printed reference parsed, our interval computed, the widening added), each some units of 2^-53
# of its magnitude off its decimal value, and at the edge the verdict would turn on the last bit: 0.285 + 0.005 >=
# 0.29 holds in floats, the same test written 0.29 - 0.285 <= 0.005 does not. 1e-9 is far above that rounding and
# far below the finest step a reference prints (the paper's 4 significant digits).
EDGE = 1e-9


def verdict(reference: float | None, tolerance: float | None, ours: float, low: float, high: float) -> str:
    """The verdict on one cell (the module's docstring): within where the reference lies in [low - tolerance,
    high + tolerance], edges included, up to `EDGE`."""
    if reference is None:
        return "no reference"
    if math.isnan(ours):
        return "not run"
    if math.isnan(low) or math.isnan(high):
        return "no interval"
    slack = tolerance or 0.0
    return "within" if _at_most(low, reference, slack) and _at_most(reference, high, slack) else "outside"


def _at_most(a: float, b: float, slack: float) -> bool:
    """a <= b + slack, up to `EDGE` of the numbers' size."""
    return a <= b + slack + EDGE * max(abs(a), abs(b), slack)


def informative(reference: float | None, tolerance: float | None) -> bool:
    """Whether a cell's verdict can tell a reproduction from a failure: it has a reference number, and the
    reference's tolerance is smaller than the number's size. A tolerance of at least |reference| (the demo's
    recorded OOD W1 of 0.47 whose run-to-run deviation reached 447) admits every number from zero to twice the
    reference and more, so the cell reads within whatever ours is, short of a failure by orders of magnitude. A
    reference of exactly 0 stays informative: its tolerance is then an absolute bound (the paper's 0.0% rounds
    below 0.05%, a recorded 0 with tolerance 0 asks for 0)."""
    if reference is None or math.isnan(reference):
        return False
    tolerance = 0.0 if tolerance is None or math.isnan(tolerance) else tolerance
    return reference == 0 or tolerance < abs(reference)


def compare(reference: Iterable[ReferenceCell], ours: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """One row per reference cell (`COLUMNS`), in the reference's order. A two-panel table's cell is matched on
    `Panel / Header`; a header the reference prints without its group (`Base`) on our only column of that
    header in the row."""
    by_key = {(row.block, row.row, row.column): row for row in ours.itertuples(index=False)}
    by_header: dict[tuple[str, str, str], list] = {}
    for row in ours.itertuples(index=False):
        by_header.setdefault((row.block, row.row, row.column.rsplit(" / ", 1)[-1]), []).append(row)
    rows = []
    for cell in reference:
        column = f"{cell.panel} / {cell.column}" if cell.panel else cell.column
        key = (cell.block, cell.row, column)
        mine = by_key.get(key)
        if mine is None and len(by_header.get(key, [])) == 1:
            (mine,) = by_header[key]  # a header without its group, where ours has one group
        value, low, high = (mine.value, mine.low, mine.high) if mine is not None else (math.nan,) * 3
        rows.append(
            {
                "block": cell.block,
                "row": cell.row,
                "column": column,
                "reference": cell.printed,
                "reference_value": cell.value,
                "tolerance": cell.tolerance,
                "ours": value,
                "low": low,
                "high": high,
                "difference": value - cell.value if cell.value is not None else math.nan,
                "verdict": verdict(cell.value, cell.tolerance, value, low, high),
                "informative": informative(cell.value, cell.tolerance),
                "protocol": protocol,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def informative_cells(comparison: pd.DataFrame) -> pd.Series:
    """Per row of a comparison (`compare`, or its `.csv` read back), whether it is `informative`: from its
    reference value and tolerance."""
    pairs = zip(comparison["reference_value"], comparison["tolerance"], strict=True)
    return pd.Series([informative(value, tolerance) for value, tolerance in pairs], index=comparison.index, dtype=bool)


def not_informative(comparison: pd.DataFrame) -> pd.DataFrame:
    """The rows of a comparison that have a reference number and are not `informative`."""
    return comparison[comparison["reference_value"].notna() & ~informative_cells(comparison)]


def verdict_counts(comparisons: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per artifact (in the given order) the number of cells of each verdict and the total; then the cells within
    that are `informative`, and the cells with a reference number that are not (whatever their verdict)."""
    counts = pd.DataFrame(
        [[int((frame["verdict"] == v).sum()) for v in VERDICTS] for frame in comparisons.values()],
        index=pd.Index(list(comparisons), name="artifact"),
        columns=list(VERDICTS),
    )
    counts["cells"] = counts.sum(axis=1)
    counts["informative within"] = [
        int(((frame["verdict"] == "within") & informative_cells(frame)).sum()) for frame in comparisons.values()
    ]
    counts["not informative"] = [len(not_informative(frame)) for frame in comparisons.values()]
    return counts.reset_index()


def scatter(comparison: pd.DataFrame, title: str):
    """Ours against the reference, one panel per column group (the metric), the colour of each point its
    verdict; the diagonal is agreement. Vertical bars: our interval; horizontal bars: the reference's tolerance.
    A cell is within when the box that the two bars span touches the diagonal."""
    shown = comparison[comparison["reference_value"].notna() & comparison["ours"].notna()]
    group_of = shown["column"].str.rsplit(" / ", n=1).str[0]
    groups = list(dict.fromkeys(group_of))
    figure, axes = plt.subplots(1, max(len(groups), 1), figsize=(3.2 * max(len(groups), 1), 3.2), squeeze=False)
    colors = {"within": "tab:green", "outside": "tab:red", "no interval": "tab:gray"}
    for ax, group in zip(axes[0], groups, strict=False):
        part = shown[group_of == group]
        for name, color in colors.items():
            points = part[part["verdict"] == name]
            if points.empty:
                continue
            errors = np.abs(np.vstack([points["ours"] - points["low"], points["high"] - points["ours"]]))
            errors = np.where(np.isnan(errors), 0.0, errors)
            tolerance = np.nan_to_num(points["tolerance"].to_numpy(dtype=float), nan=0.0)
            ax.errorbar(
                points["reference_value"], points["ours"], yerr=errors, xerr=tolerance, fmt="o", ms=3, color=color,
                label=name,
            )  # fmt: skip
        values = pd.concat([part["reference_value"], part["ours"]])
        if len(values):
            low, high = float(values.min()), float(values.max())
            ax.plot([low, high], [low, high], color="black", lw=0.8)
            if low > 0 and high / low > 100:  # W1 spans decades where a model fails
                ax.set_xscale("log")
                ax.set_yscale("log")
        ax.set_title(group, fontsize=9)
        ax.set_xlabel("reference")
        ax.set_ylabel("ours")
    axes[0][0].legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return figure


def comparison_table(comparison: pd.DataFrame, row: Artifact, reference: str) -> Table:
    """A table's comparison as a table of its own, named after the table (under results/reproduction/)."""
    caption = (
        f"{row.label or row.name} against {reference}: the reference's number as printed, ours, our interval, the "
        "difference and the verdict (within: the reference lies in our interval widened by its tolerance); "
        "informative: not where that tolerance is at least the reference's size, which makes within say little."
    )
    formats = {name: ".6g" for name in ("reference_value", "tolerance", "ours", "low", "high", "difference")}
    return Table(comparison, row.label, caption, formats=formats, wide=True, font_size="scriptsize")


def reproduce(
    row: Artifact,
    per_seed: Sequence[Mapping[str, Sequence[str]]],
    settings: dict,
    reference: Sequence[ReferenceCell],
    source: str,
    protocol: str,
    directory: str | Path,
) -> list[Path]:
    """Render the table of `row` as rule `table` does (from the inputs of each seed it shows), compare it with its
    reference cells, and write the comparison (`.csv`, `.md`, `.tex`) and its scatter (`.pdf`, `.png`) under
    `directory`."""
    table = render_artifact(row, per_seed, settings)
    cells = [cell for cell in reference if cell.artifact == row.name]
    comparison = compare(cells, table_cells(table), protocol)
    written = write_table(comparison_table(comparison, row, source), directory)
    return written + save_figure(scatter(comparison, f"{row.name}: ours against {source}"), row.name, directory)


def summary_table(comparisons: dict[str, pd.DataFrame], source: str, protocol: str) -> Table:
    """Per artifact, the count of each verdict: the top of the reproduction report."""
    caption = (
        f"Verdicts per table against {source}, protocol {protocol}; informative within: the cells within whose "
        "reference's tolerance is smaller than the reference; not informative: the cells whose tolerance is not."
    )
    return Table(verdict_counts(comparisons), "tab:reproduction", caption)


def read_tables(directory: str | Path, names: Iterable[str]) -> dict[str, pd.DataFrame]:
    """The `.csv` frames of the tables of `names` that `directory` holds."""
    paths = {name: Path(directory) / f"{name}.csv" for name in names}
    return {name: pd.read_csv(path) for name, path in paths.items() if path.exists()}


def widen(reference: Sequence[ReferenceCell], spread: Sequence[str | Path]) -> list[ReferenceCell]:
    """`widened_reference` of a recorded reference by the tables folders of more runs."""
    names = sorted({cell.artifact for cell in reference})
    return widened_reference(reference, [read_tables(other, names) for other in spread])


def record(directory: str | Path, names: Iterable[str], spread: Sequence[str | Path] = ()) -> list[ReferenceCell]:
    """A run's tables (`{directory}/{name}.csv`) as a reference (`recorded_reference`), each number's tolerance
    the largest deviation from it over the runs of `spread` (other seeds, other CPU feature sets: tables
    folders); 0 for a number no such run has."""
    names = list(names)
    return recorded_reference(read_tables(directory, names), [read_tables(other, names) for other in spread])


def recording_machine(tables: str | Path) -> dict:
    """What produced a recorded run: the machine, its CPU kernel pins, the package versions, the pipeline's
    commit and the seeds of the run's evaluations (`job.seed` of each metrics.json beside `tables`: under eval/
    with one seed, under seeds/{seed}/eval/ with several)."""
    root = Path(tables).parent
    metrics = [*root.glob("eval/*/*/*/**/metrics.json"), *root.glob("seeds/*/eval/*/*/*/**/metrics.json")]
    seeds = sorted({json.loads(path.read_text()).get("job", {}).get("seed") for path in metrics} - {None})
    git = git_state()
    return {
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": _processor(),
        "cpu": cpu_pins(),
        "packages": package_versions(),
        "commit": None if git is None else git["commit"],
        "seeds": seeds,
    }


def _processor() -> str | None:
    """The CPU's model name (Linux), which tells its SIMD features apart."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


def recorded_reference(
    tables: dict[str, pd.DataFrame], spread: Sequence[dict[str, pd.DataFrame]] = ()
) -> list[ReferenceCell]:
    """A run's own numbers as a reference (the demo's recorded run): every number of each table's `.csv` frame
    (`cells`), at full precision; an empty cell is "---". A number's tolerance is its largest deviation over
    the `spread` runs' same cells (0 without them)."""
    recorded = []
    for name, frame in tables.items():
        others = _spread_values(spread, name)
        for cell in cells(frame).itertuples(index=False):
            key, missing = (cell.block, cell.row, cell.column), math.isnan(cell.value)
            printed, value = ("---", None) if missing else (repr(cell.value), cell.value)
            tolerance = _largest_deviation(value, key, others)
            recorded.append(ReferenceCell(name, "", *key, printed, value, tolerance, False))
    return recorded


def widened_reference(
    reference: Sequence[ReferenceCell], spread: Sequence[dict[str, pd.DataFrame]]
) -> list[ReferenceCell]:
    """A recorded reference whose tolerances also cover more runs (other seeds, other CPUs): each number keeps
    its recorded value, and its tolerance becomes the largest of its recorded one and its deviations over the
    `spread` runs' same cells."""
    others = {name: _spread_values(spread, name) for name in {cell.artifact for cell in reference}}
    widened = []
    for cell in reference:
        seen = _largest_deviation(cell.value, (cell.block, cell.row, cell.column), others[cell.artifact])
        tolerance = cell.tolerance if cell.value is None else max(cell.tolerance or 0.0, seen)
        widened.append(replace(cell, tolerance=tolerance))
    return widened


def _spread_values(spread: Sequence[dict[str, pd.DataFrame]], name: str) -> list[pd.Series]:
    """Each `spread` run's numbers of table `name`, indexed by (block, row, column)."""
    return [cells(run[name]).set_index(["block", "row", "column"])["value"] for run in spread if name in run]


def _largest_deviation(value: float | None, key: tuple, others: Sequence[pd.Series]) -> float:
    """The largest deviation from `value` of the cell `key` over the runs `others` that have a number there; 0
    without one, or for a cell without a number."""
    if value is None:
        return 0.0
    seen = [other[key] for other in others if key in other.index]
    return max((abs(v - value) for v in seen if not math.isnan(v)), default=0.0)
