"""The paper's reported numbers as data: every cell of its results tables and its compute statement, read from
the paper's LaTeX source. The workflow reads this module to plan; it imports nothing heavy.

    calibft reference reference/paper_tables.tex > reference/paper.csv

`reference/paper_tables.tex` holds the table environments and the compute paragraph of the paper, verbatim;
`reference/paper.csv` is what this module reads from them, one row per printed number, with the rounding it
was printed at. A cell keeps what the paper shows: its artifact (the registry's name of the table), its panel
(the sub-table caption of a two-panel table), its block (the model of an ablation table's block), its row
key (the model, task or slice; the setting columns of an ablation row), its column (the column group and
header, as `Group / Header`), the printed text, the value (a percentage as a fraction; None for "---", which
the paper prints where a value is undefined) and its tolerance (half the last printed digit).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from calibft.artifacts.registry import Artifact, table_name

CONDITIONS = ("Base", "Soft", "Hard", "SSOT")
ARROWS = ("↓", "↑")
MISSING = "---"
COMPUTE = "compute"  # the artifact name of the compute statement's numbers

# LaTeX of the tables' headers and cells, and its plain text (as the workflow's own tables print it).
_LATEX = [
    (r"$W_1$", "W₁"),
    (r"W_1", "W₁"),
    (r"$\downarrow$", "↓"),
    (r"\downarrow", "↓"),
    (r"$\uparrow$", "↑"),
    (r"\uparrow", "↑"),
    (r"\%", "%"),
    (r"\&", "&"),
    ("$", ""),
]
_SHORTSTACK = re.compile(r"\\shortstack\{(.*?)\}")
_BOLD = re.compile(r"^\\textbf\{(.*)\}$")
_MULTICOLUMN = re.compile(r"^\\multicolumn\{(\d+)\}\{[^}]*\}\{(.*)\}$")
_NUMBER = re.compile(r"^-?\d+(?:\.(\d+))?(?:e([+-]\d+))?(%?)$")
_ENVIRONMENT = re.compile(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", re.DOTALL)
_PANEL = re.compile(r"\\begin\{minipage\}.*?\\end\{minipage\}", re.DOTALL)
_SUBCAPTION = re.compile(r"\\caption\*\{(.*?)\}\s*\\end\{minipage\}", re.DOTALL)


@dataclass(frozen=True)
class ReferenceCell:
    """One number the paper prints."""

    artifact: str  # the table's name in the registry (its label without `tab:`), or `compute`
    panel: str  # a two-panel table's sub-caption, without its "(a) "; "" for a one-panel table
    block: str  # an ablation table's block (its model); ""
    row: str  # the row's key: its first cell, or `header=value` of each setting column
    column: str  # `Group / Header`, or the header alone where the column has no group
    printed: str  # as printed, e.g. "17.3%", "5.47e+03", "---"
    value: float | None  # the number (a percentage as a fraction); None where the paper prints "---"
    # how far the reference may lie from its own run's number: half the last printed digit for the paper (its
    # rounding), the largest deviation seen over repeated runs for a recorded run; in the value's unit
    tolerance: float | None
    bold: bool  # printed in bold (the best of its group)


def plain(latex: str) -> str:
    """The text of a header or cell: W₁, ↓, ↑ and % for their LaTeX, a shortstack's lines joined by spaces."""
    text = _SHORTSTACK.sub(lambda m: m.group(1).replace(r"\\", " "), latex.strip())
    for source, target in _LATEX:
        text = text.replace(source, target)
    return " ".join(text.split())


def parse_number(printed: str) -> tuple[float | None, float | None]:
    """(value, half step) of a printed cell: `17.3%` is (0.173, 0.0005), `5.47e+03` is (5470.0, 5.0), `---` is
    (None, None)."""
    if printed == MISSING:
        return None, None
    match = _NUMBER.match(printed)
    if match is None:
        raise ValueError(f"not a number the paper prints: {printed!r}")
    decimals, exponent, percent = match.groups()
    step = 10.0 ** (-len(decimals or "") + int(exponent or 0))
    scale = 0.01 if percent else 1.0
    return float(printed.rstrip("%")) * scale, round(step / 2 * scale, 12)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.rstrip().removesuffix(r"\\").split("&")]


def _headers(lines: list[str]) -> list[tuple[str, str]]:
    """(group, header) of every column, from the header lines: a group line of \\multicolumn spans, then the
    headers."""
    *groups, last = lines
    headers = [plain(cell) for cell in _cells(last)]
    spans = [""] * len(headers)
    for line in groups:
        column = 0
        for cell in _cells(line):
            match = _MULTICOLUMN.match(cell)
            width, text = (int(match.group(1)), plain(match.group(2))) if match else (1, plain(cell))
            spans[column : column + width] = [text] * width
            column += width
    return list(zip(spans, headers, strict=True))


def is_value_column(group: str, header: str) -> bool:
    """A column of numbers (a condition, or a metric with its arrow), not one that keys the rows."""
    return header in CONDITIONS or any(arrow in group + header for arrow in ARROWS)


def parse_tabular(tabular: str, artifact: str, panel: str = "") -> list[ReferenceCell]:
    """Every numeric cell of one tabular environment."""
    lines = [line.strip() for line in tabular.splitlines()]
    # rules and row colours carry no cell (the ablation tables shade the final recipe's row)
    lines = [line for line in lines if line and not line.startswith(("\\begin", "\\end", "\\cmidrule", "\\rowcolor"))]
    top, first_rule = lines.index(r"\toprule"), lines.index(r"\midrule")
    columns = _headers(lines[top + 1 : first_rule])
    keys = [i for i, (group, header) in enumerate(columns) if not is_value_column(group, header)]
    found, block = [], ""
    for line in lines[first_rule + 1 :]:
        if line in (r"\midrule", r"\bottomrule"):
            continue
        cells = _cells(line)
        spanning = _MULTICOLUMN.match(cells[0])
        if len(cells) == 1 and spanning:
            block = plain(spanning.group(2))
            continue
        if len(cells) != len(columns):
            raise ValueError(f"{artifact}: a row of {len(cells)} cells under {len(columns)} columns: {line}")
        texts = [plain(cell) for cell in cells]
        row = texts[0] if len(keys) == 1 else ", ".join(f"{columns[i][1]}={texts[i]}" for i in keys)
        for i, (group, header) in enumerate(columns):
            if i in keys:
                continue
            bold = _BOLD.match(cells[i])
            printed = plain(bold.group(1)) if bold else texts[i]
            value, tolerance = parse_number(printed)
            column = f"{group} / {header}" if group else header
            found.append(ReferenceCell(artifact, panel, block, row, column, printed, value, tolerance, bool(bold)))
    return found


def parse_environment(environment: str) -> list[ReferenceCell]:
    """The cells of one table environment: its tabular, or each panel's (a minipage with a `\\caption*`), under
    the label that follows it (an environment may hold two tables, each with its label)."""
    cells = []
    labels = list(re.finditer(r"\\label\{(tab:[^}]*)\}", environment))
    for match in re.finditer(r"\\begin\{tabular\}.*?\\end\{tabular\}", environment, re.DOTALL):
        label = next(m.group(1) for m in labels if m.start() > match.start())
        panel = ""
        for minipage in _PANEL.finditer(environment):
            if minipage.start() < match.start() < minipage.end():
                caption = _SUBCAPTION.search(minipage.group(0))
                panel = re.sub(r"^\([a-z]\)\s*", "", plain(caption.group(1))) if caption else ""
        cells += parse_tabular(match.group(0), table_name(label), panel)
    return cells


_TRAINING = re.compile(r"for (soft|hard)-target fine-tuning \(median [\d.]+ minutes; ([\d.]+) A100 GPU-hours total")
_EVALUATION = re.compile(r"([\d.]+)h for ([A-Za-z -]+?)(?=,| and |$)")


def parse_compute(text: str) -> list[ReferenceCell]:
    """The compute statement: the A100 GPU-hours of each objective's training runs, and the summed wall-clock
    hours of each evaluation."""

    def cell(row: str, column: str, printed: str) -> ReferenceCell:
        return ReferenceCell(COMPUTE, "", "", row, column, printed, *parse_number(printed), False)

    cells = [cell(f"training {objective}", "A100 GPU-hours", hours) for objective, hours in _TRAINING.findall(text)]
    statement = text[text.index("summed per-run wall-clock estimates were") :].split(", with ")[0]
    return cells + [cell(stage.strip(), "wall-clock hours", hours) for hours, stage in _EVALUATION.findall(statement)]


def extract(latex: str) -> list[ReferenceCell]:
    """Every cell of every table environment in `latex`, then the compute statement's numbers."""
    cells = [cell for environment in _ENVIRONMENT.findall(latex) for cell in parse_environment(environment)]
    return cells + parse_compute(latex)


def compared_rows(rows: Iterable[Artifact], reference: Sequence[ReferenceCell]) -> list[Artifact]:
    """The tables of `rows` that the reference has numbers of."""
    named = {cell.artifact for cell in reference}
    return [row for row in rows if row.kind == "table" and row.name in named]


def to_csv(cells: Iterable[ReferenceCell]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(field.name for field in fields(ReferenceCell))
    for cell in cells:
        writer.writerow("" if value is None else value for value in astuple(cell))
    return out.getvalue()


CSV_COLUMNS = ("artifact", "panel", "block", "row", "column", "printed", "value", "tolerance", "bold")


def read_csv_file(path: str | os.PathLike) -> list[ReferenceCell]:
    """The cells of a reference CSV file (`read_csv`, its errors naming the file)."""
    return list(read_csv(Path(path).read_text(), str(path)))


def read_csv(text: str, source: str = "reference/paper.csv") -> Iterator[ReferenceCell]:
    """The cells of `reference/paper.csv` (or of a run's recorded CSV, `calibft reference --record`).

    Raises ValueError naming `source`, the line and the fix at a header without the columns, a row with too
    few or too many fields, or a value or tolerance that is not a number.
    """
    fix = (
        "fix that line, or write the file again (calibft reference reference/paper_tables.tex > "
        "reference/paper.csv, or calibft reference --record TABLES for a run)"
    )
    reader = csv.DictReader(io.StringIO(text))
    missing = [key for key in CSV_COLUMNS if key not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"{source}, line 1: the header lacks the columns {', '.join(missing)}; {fix}")
    for row in reader:
        line = reader.line_num
        if None in row or any(row[key] is None for key in CSV_COLUMNS):
            fields = sum(value is not None for key, value in row.items() if key is not None) + len(row.get(None, ()))
            raise ValueError(
                f"{source}, line {line}: {fields} fields where the header has {len(reader.fieldnames)}; {fix}"
            )
        numbers = {}
        for key in ("value", "tolerance"):
            try:
                numbers[key] = float(row[key]) if row[key] else None
            except ValueError:
                raise ValueError(f"{source}, line {line}: {key} {row[key]!r} is not a number; {fix}") from None
        yield ReferenceCell(
            **{key: row[key] for key in ("artifact", "panel", "block", "row", "column", "printed")},
            **numbers,
            bold=row["bold"] == "True",
        )
