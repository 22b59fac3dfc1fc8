"""One table, three files: `{name}.csv` (the numbers at full precision), `{name}.md` (a GitHub markdown
table for a terminal) and `{name}.tex` (a booktabs table with its caption and label, to drop into the paper).

A table is a DataFrame plus how to present it (`Table`). Cells hold plain values: numbers stay numbers (the
`.csv` keeps them exactly), text is plain Unicode (Greek letters and math symbols such as μ, ∈, ×, ↓ are
fine: the `.tex` writer turns them into LaTeX, and escapes LaTeX's special characters). The frame's index
is not written: `reset_index()` first to show it. Columns may have two levels (a `MultiIndex`): the `.tex`
spans each group with a `\\multicolumn` and a rule under it, the `.csv` and `.md` join the levels with " / ".

`grouped_table` builds the renderers' common layout: one row per model, one column group per metric, one column
per condition, the best cell of each group bold (`best_cells`).
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibft.artifacts.formats import format_number
from calibft.artifacts.registry import table_name
from calibft.artifacts.runs import Titles
from calibft.core.io import atomic_path

Format = str | Callable[[Any], str]

SUFFIXES = ("tex", "csv", "md")


@dataclass(frozen=True, eq=False)
class Table:
    """A DataFrame and its presentation.

    label: the paper's LaTeX label (`tab:main-ood`); the files are named after it (`main_ood`).
    formats: per column, a format spec (`".3f"`, `".1%"`) or a function from the value to its text, used in
        the `.md` and `.tex` (never in the `.csv`). Without one, numbers print with 6 significant digits.
    code: columns shown in monospace. bold: a frame of booleans of the same shape, True where a cell is bold.
    shaded: one boolean per row, True where the `.tex` shades the row with `shade_color`.
    intervals: a frame of the same shape holding [low, high] where a cell's number has an uncertainty interval,
        None elsewhere; not written to the table's files (the reproduction report reads it).
    spread: a frame of the same shape holding the standard deviation of a cell's number over seeds (a table
        over several seeds, `calibft.artifacts.seed_tables`), NaN elsewhere: the `.md` and `.tex` print
        `mean ± sd`, the `.csv` adds a column `{name} sd` after each column that has one.
    bounds: a frame of the same shape holding certified [low, high] bounds of a cell's number (high None where
        unbounded), None elsewhere: the `.md` and `.tex` print them after the number, `[low, high]`, where
        they are wider than its printed precision (the ends print differently).
    column_format: the `tabular` column specification; by default `l` for text and `r` for number columns.
    wide: a `table*` spanning both columns. font_size: a LaTeX size command without backslash, or None.
    """

    frame: pd.DataFrame
    label: str
    caption: str = ""
    formats: Mapping[Any, Format] = field(default_factory=dict)
    code: Sequence[Any] = ()
    bold: pd.DataFrame | None = None
    shaded: Sequence[bool] | None = None
    column_format: str | None = None
    wide: bool = False
    font_size: str | None = "small"
    shade_color: str = "black!7"
    missing: str = "---"
    intervals: pd.DataFrame | None = None
    spread: pd.DataFrame | None = None
    bounds: pd.DataFrame | None = None

    def __post_init__(self):
        table_name(self.label)
        columns = list(self.frame.columns)
        unknown = [c for c in [*self.formats, *self.code] if c not in columns]
        if unknown:
            raise ValueError(f"{self.label}: formats/code name unknown columns {unknown}; columns are {columns}")
        if self.bold is not None and self.bold.shape != self.frame.shape:
            raise ValueError(f"{self.label}: bold has shape {self.bold.shape}, the frame {self.frame.shape}")
        for name in ("intervals", "spread", "bounds"):
            extra = getattr(self, name)
            if extra is not None and extra.shape != self.frame.shape:
                raise ValueError(f"{self.label}: {name} has shape {extra.shape}, the frame {self.frame.shape}")
        if self.shaded is not None and len(self.shaded) != len(self.frame):
            raise ValueError(f"{self.label}: shaded has {len(self.shaded)} rows, the frame {len(self.frame)}")
        if self.frame.columns.nlevels > 2:
            raise ValueError(f"{self.label}: at most two levels of columns")

    @property
    def name(self) -> str:
        return table_name(self.label)


def write_table(table: Table, directory: str | Path) -> list[Path]:
    """Write `{directory}/{table.name}.tex`, `.csv` and `.md`, each atomically; return their paths."""
    paths = []
    for suffix, render in zip(SUFFIXES, (to_latex, to_csv, to_markdown), strict=True):
        path = Path(directory) / f"{table.name}.{suffix}"
        with atomic_path(path) as tmp:
            tmp.write_text(render(table))
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------- cells


def _is_missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists and other containers
        return False


def cell_text(value: Any, fmt: Format | None = None, missing: str = "---") -> str:
    """The text of one cell for the `.md` and `.tex`."""
    if _is_missing(value):
        return missing
    if fmt is not None:
        return fmt(value) if callable(fmt) else format(value, fmt)
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, numbers.Real):
        return format_number(value)
    return str(value)


def _header_levels(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """(group, name) of every column; the group is "" for flat columns."""
    if frame.columns.nlevels == 1:
        return [("", str(c)) for c in frame.columns]
    return [(str(top), str(sub)) for top, sub in frame.columns]


def flat_names(frame: pd.DataFrame) -> list[str]:
    """The column names as the `.csv` and `.md` write them: a group and its column joined by " / "."""
    return [" / ".join(part for part in pair if part) for pair in _header_levels(frame)]


def _is_number_column(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _bounds_text(bounds: Sequence[float | None] | None, fmt: Format | None) -> str:
    """` [low, high]` where certified bounds print differently at the cell's precision (`high` None: unbounded);
    nothing otherwise."""
    if bounds is None or bounds[0] is None:
        return ""
    low, high = (cell_text(side, fmt) if side is not None else "∞" for side in bounds)
    return "" if low == high else f" [{low}, {high}]"


def _cells(table: Table) -> list[list[str]]:
    """The text of every cell: its value, ` ± sd` where it has a spread over seeds, and its certified bounds where
    they are wider than its printed precision."""
    frame = table.frame
    spread = np.full(frame.shape, np.nan) if table.spread is None else table.spread.to_numpy(dtype=float)
    bounds = np.full(frame.shape, None) if table.bounds is None else table.bounds.to_numpy(dtype=object)
    rows = []
    for r, row in enumerate(frame.itertuples(index=False, name=None)):
        cells = []
        for c, (column, value) in enumerate(zip(frame.columns, row, strict=True)):
            fmt = table.formats.get(column)
            text = cell_text(value, fmt, table.missing)
            if not np.isnan(spread[r, c]) and text != table.missing:
                text += f" ± {cell_text(spread[r, c], fmt)}"
            if text != table.missing:
                text += _bounds_text(bounds[r, c], fmt)
            cells.append(text)
        rows.append(cells)
    return rows


def _bold(table: Table) -> np.ndarray:
    if table.bold is None:
        return np.zeros(table.frame.shape, dtype=bool)
    return table.bold.to_numpy(dtype=bool)


# ---------------------------------------------------------------------------------------------- grouped tables


def _shown(values: pd.DataFrame, fmt: Callable[[float], str]) -> pd.DataFrame:
    """The values as a reader sees them (parsed back from their text), so that cells printed alike tie."""
    return values.map(lambda v: float(fmt(v).rstrip("%")) if np.isfinite(v) else np.nan)


def best_cells(values: pd.DataFrame, fmt: Callable[[float], str], lowest: bool) -> pd.DataFrame:
    """True at the best value of each row (lowest or highest) as printed; every tied cell; never where undefined."""
    shown = _shown(values, fmt)
    best = shown.min(axis=1) if lowest else shown.max(axis=1)
    return shown.eq(best, axis=0) & shown.notna()


def grouped_table(
    groups: Sequence[tuple[str, pd.DataFrame, Callable[[float], str], bool | None]],
    titles: Titles,
    label: str,
    caption: str,
    intervals: Mapping[str, pd.DataFrame] | None = None,
    bounds: Mapping[str, pd.DataFrame] | None = None,
) -> Table:
    """One row per model, one column group per metric, one column per condition; bold where `lowest` is not None.
    `intervals` gives a group's [low, high] per model and condition (`calibft.artifacts.runs.aggregate_intervals`),
    `bounds` its certified bounds (`calibft.artifacts.runs.aggregate_bounds`)."""
    models = list(groups[0][1].index)
    columns: dict[tuple[str, str], Any] = {("", "Model"): [titles.model(m) for m in models]}
    bold: dict[tuple[str, str], Any] = {("", "Model"): [False] * len(models)}
    spans: dict[tuple[str, str], Any] = {("", "Model"): [None] * len(models)}
    certified: dict[tuple[str, str], Any] = {("", "Model"): [None] * len(models)}
    formats = {}
    for group, values, fmt, lowest in groups:
        best = (
            best_cells(values, fmt, lowest) if lowest is not None else pd.DataFrame(False, values.index, values.columns)
        )
        for condition in values.columns:
            column = (group, titles.condition(condition))
            if column in columns:
                raise ValueError(f"{label}: two conditions are titled {column[1]!r} in {group!r}")
            columns[column] = values[condition].to_numpy(dtype=float)
            bold[column] = best[condition].to_numpy(dtype=bool)
            group_intervals = (intervals or {}).get(group)
            spans[column] = [None] * len(models) if group_intervals is None else list(group_intervals[condition])
            group_bounds = (bounds or {}).get(group)
            certified[column] = [None] * len(models) if group_bounds is None else list(group_bounds[condition])
            formats[column] = fmt
    index = pd.MultiIndex.from_tuples(list(columns))
    frame = pd.DataFrame(dict(enumerate(columns.values())))
    frame.columns = index
    bold_frame = pd.DataFrame(dict(enumerate(bold.values())))
    bold_frame.columns = index

    def per_cell(cells: dict[tuple[str, str], Any]) -> pd.DataFrame:
        extra = pd.DataFrame(dict(enumerate(cells.values())), dtype=object)
        extra.columns = index
        return extra

    return Table(
        frame, label, caption, formats=formats, bold=bold_frame, wide=True, font_size="footnotesize",
        intervals=per_cell(spans) if intervals else None, bounds=per_cell(certified) if bounds else None,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------- csv


def to_csv(table: Table) -> str:
    """Every value as stored (floats at full precision), one header row (two-level headers joined); after each
    column with a spread over seeds, its standard deviations as `{name} sd`."""
    names, columns = flat_names(table.frame), {}
    for i, name in enumerate(names):
        columns[name] = table.frame.iloc[:, i]
        if table.spread is not None and table.spread.iloc[:, i].notna().any():
            columns[f"{name} sd"] = table.spread.iloc[:, i].astype(float)
    return pd.DataFrame(columns).to_csv(index=False, lineterminator="\n")


# ---------------------------------------------------------------------------------------------- markdown


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(table: Table) -> str:
    """A GitHub markdown table: header, alignment row, one line per row."""
    frame, bold = table.frame, _bold(table)
    code = {i for i, column in enumerate(frame.columns) if column in table.code}
    header = [_md_escape(name) for name in flat_names(frame)]
    align = ["---:" if _is_number_column(frame.iloc[:, i]) else ":---" for i in range(frame.shape[1])]
    lines = [_md_row(header), _md_row(align)]
    for r, row in enumerate(_cells(table)):
        cells = []
        for c, text in enumerate(row):
            text = f"`{text}`" if c in code and text != table.missing else _md_escape(text)
            cells.append(f"**{text}**" if bold[r, c] else text)
        lines.append(_md_row(cells))
    return "\n".join(lines) + "\n"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# ---------------------------------------------------------------------------------------------- LaTeX

_MATH = {
    **dict(
        zip(
            "αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΦΨΩ",
            r"\alpha \beta \gamma \delta \epsilon \zeta \eta \theta \iota \kappa \lambda \mu \nu \xi \pi \rho "
            r"\sigma \tau \upsilon \phi \chi \psi \omega \Gamma \Delta \Theta \Lambda \Xi \Pi \Sigma \Phi \Psi "
            r"\Omega".split(),
            strict=True,
        )
    ),
    **{chr(0x2080 + d): f"_{d}" for d in range(10)},  # subscript digits
    **{"ₘ": "_m", "ₙ": "_n", "ₖ": "_k", "ᵢ": "_i"},
    "∈": r"\in",
    "×": r"\times",
    "≤": r"\leq",
    "≥": r"\geq",
    "≠": r"\neq",
    "≈": r"\approx",
    "±": r"\pm",
    "∞": r"\infty",
    "−": "-",
    "→": r"\rightarrow",
    "↑": r"\uparrow",
    "↓": r"\downarrow",
    "·": r"\cdot",
}
_LATEX = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
        "<": r"\textless{}",
        ">": r"\textgreater{}",
        "—": "---",
        "–": "--",
        "…": r"\ldots{}",
        **{char: f"\\ensuremath{{{command}}}" for char, command in _MATH.items()},
    }
)
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?")


_SUBSCRIPT_RUN = re.compile(r"(?:\\ensuremath\{_\w\}){2,}")


def latex_escape(text: str) -> str:
    """Plain text as LaTeX: special characters escaped, Greek letters and math symbols in math mode; a run of
    subscript characters is one subscript (Q₉₅ is Q_{95})."""
    return _SUBSCRIPT_RUN.sub(_one_subscript, text.translate(_LATEX))


def _one_subscript(run: re.Match) -> str:
    characters = "".join(re.findall(r"_(\w)", run[0]))
    return f"\\ensuremath{{_{{{characters}}}}}"


def _latex_cell(text: str) -> str:
    """A cell that is one number prints in math mode (a true minus sign, `2 \\times 10^{-4}`), and so do both
    numbers of `mean ± sd`."""
    if " ± " in text:
        mean, sd = text.split(" ± ", 1)
        return f"{_latex_cell(mean)} \\ensuremath{{\\pm}} {_latex_cell(sd)}"
    match = _NUMBER.fullmatch(text)
    if match is None:
        return latex_escape(text)
    if match.group(1) is None:
        return f"\\ensuremath{{{text}}}" if text.startswith("-") else text
    mantissa = text[: text.index("e")]
    return f"\\ensuremath{{{mantissa} \\times 10^{{{int(match.group(1))}}}}}"


def _default_column_format(frame: pd.DataFrame) -> str:
    return "@{}" + "".join("r" if _is_number_column(frame.iloc[:, i]) else "l" for i in range(frame.shape[1])) + "@{}"


def _latex_header(frame: pd.DataFrame) -> list[str]:
    levels = _header_levels(frame)
    names = " & ".join(latex_escape(name) for _, name in levels) + r" \\"
    if frame.columns.nlevels == 1:
        return [names]
    groups: list[tuple[str, int, int]] = []  # (group, first column, last column), 1-based
    for i, (group, _) in enumerate(levels, start=1):
        if groups and groups[-1][0] == group:
            groups[-1] = (group, groups[-1][1], i)
        else:
            groups.append((group, i, i))
    top = " & ".join(
        f"\\multicolumn{{{last - first + 1}}}{{c}}{{{latex_escape(group)}}}" if last > first else latex_escape(group)
        for group, first, last in groups
    )
    rules = "".join(f"\\cmidrule(lr){{{first}-{last}}}" for group, first, last in groups if group)
    return [top + r" \\", *([rules] if rules else []), names]


def to_latex(table: Table) -> str:
    """A booktabs `tabular` in a `table` float with the caption and the paper's label."""
    frame, bold = table.frame, _bold(table)
    code = {i for i, column in enumerate(frame.columns) if column in table.code}
    environment = "table*" if table.wide else "table"
    lines = [
        f"% {table.name}: written by calibft.artifacts.tables; change the code that builds it, not this file.",
        f"\\begin{{{environment}}}[htbp]",
        "\\centering",
        *([f"\\{table.font_size}"] if table.font_size else []),
        f"\\begin{{tabular}}{{{table.column_format or _default_column_format(frame)}}}",
        "\\toprule",
        *_latex_header(frame),
        "\\midrule",
    ]
    for r, row in enumerate(_cells(table)):
        cells = []
        for c, text in enumerate(row):
            text = _latex_cell(text)
            if c in code and row[c] != table.missing:
                text = f"\\texttt{{{text}}}"
            cells.append(f"\\textbf{{{text}}}" if bold[r, c] else text)
        if table.shaded is not None and table.shaded[r]:
            lines.append(f"\\rowcolor{{{table.shade_color}}}")
        lines.append(" & ".join(cells) + r" \\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if table.caption:
        lines.append(f"\\caption{{{latex_escape(table.caption)}}}")
    lines += [f"\\label{{{table.label}}}", f"\\end{{{environment}}}"]
    return "\n".join(lines) + "\n"
