"""The paper's numbers as data (calibft.artifacts.reference) against the tables of reference/paper_tables.tex."""

import re
from collections import Counter
from pathlib import Path

import pytest

from calibft.artifacts.reference import ReferenceCell, extract, parse_number, parse_tabular, plain, read_csv, to_csv
from calibft.artifacts.registry import BY_NAME
from calibft.artifacts.tables import table_name

REPO = Path(__file__).resolve().parents[1]
CELLS = extract((REPO / "reference" / "paper_tables.tex").read_text())

# 12 models x 3 conditions per column group; the ablations' 2 models x recipes x 2 splits
COUNTS = {
    "main_ood": 12 * 9,
    "main_unseen": 12 * 9,
    "ssot_structured_ood": 12 * 6,
    "ssot_structured_unseen": 12 * 6,
    "generative_distribution_summary": 12 * 12,
    "noveltybench_summary": 12 * 12,
    "mcq_summary": 12 * 6,
    "retention_transfer_summary": 12 * 6,
    "retention_summary": 12 * 3 + 6 * 3,  # per model, and per task
    "paloma_model_summary": 12 * 3 * 2,  # perplexity and bits per byte
    "paloma_slice_summary": 7 * 3 * 2,
    "grid_ablation": 2 * 9 * 2,
    "hard_label_ablation": 2 * 10 * 2,
    "compute": 2 + 6,
}


def cell(artifact: str, row: str, column: str, **where) -> ReferenceCell:
    (found,) = [
        c
        for c in CELLS
        if (c.artifact, c.row, c.column) == (artifact, row, column)
        and all(getattr(c, key) == value for key, value in where.items())
    ]
    return found


def test_every_table_holds_every_number():
    assert Counter(c.artifact for c in CELLS) == COUNTS
    assert set(COUNTS) - {"compute"} <= set(BY_NAME)  # named as the workflow's tables


def test_the_docs_count_each_table():
    docs = (REPO / "docs" / "reproduction.md").read_text()
    counts = {table_name(label): int(n) for label, n in re.findall(r"`(tab:[a-z-]+)`\s+(\d+)", docs)}
    assert counts == {name: n for name, n in COUNTS.items() if name != "compute"}
    assert f"compute statement's {COUNTS['compute']}: {len(CELLS):,} in all" in docs
    assert f"({len(CELLS):,} cells)" in (REPO / "README.md").read_text()


def test_hand_checked_cells():
    assert cell("main_ood", "Qwen3-0.6B", "OOD W₁ ↓ / Hard") == ReferenceCell(
        "main_ood", "", "", "Qwen3-0.6B", "OOD W₁ ↓ / Hard", "0.2641", 0.2641, 0.00005, True
    )
    valid = cell("main_ood", "Gemma-3-1B-it", "Valid rate ↑ / Base")
    assert (valid.printed, valid.value, valid.tolerance, valid.bold) == ("72.1%", 0.721, 0.0005, True)
    assert cell("main_ood", "GPT-OSS-20B", "OOD W₁ ↓ / Base").value == 5470.0
    assert cell("ssot_structured_ood", "Qwen3-0.6B", "OOD W₁ ↓ / SSOT").value == 2.05e30
    ppl = cell("paloma_slice_summary", "WikiText-103", "Hard", panel="PALOMA Perplexity ↓")
    assert (ppl.value, ppl.bold) == (27.84, True)
    assert cell("paloma_slice_summary", "WikiText-103", "Hard", panel="PALOMA Bits per Byte ↓").value == 0.881
    assert cell("retention_summary", "GSM8K Flex", "Base").value == 0.645
    row = "d=5, max bins=16384, spp=32, epochs=1, total draws=32"
    assert cell("hard_label_ablation", row, "Unseen W₁ ↓", block="Qwen3-14B").value == 0.0597
    ablation = cell("hard_label_ablation", row, "Unseen W₁ ↓", block="Gemma-3-12B-it")
    assert (ablation.value, ablation.bold) == (0.0708, True)
    assert cell("grid_ablation", "d=2, max bins=1001", "Unseen W₁ ↓", block="Qwen3-14B").value == 0.0936
    assert cell("compute", "training hard", "A100 GPU-hours").value == 26.7
    assert cell("compute", "NoveltyBench", "wall-clock hours").value == 194.0


def test_dashes_are_numbers_the_paper_could_not_compute():
    missing = [(c.artifact, c.row, c.column) for c in CELLS if c.value is None]
    assert all(c.printed == "---" for c in CELLS if c.value is None)
    assert ("main_unseen", "Qwen3-0.6B", "Unseen-Param W₁ ↓ / Base") in missing
    assert ("mcq_summary", "Qwen3-0.6B", "MCQ TV ↓ / Soft") in missing
    assert ("main_ood", "Qwen3-0.6B", "OOD W₁ ↓ / Base") not in missing
    assert len(missing) == 16


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("0.462", (0.462, 0.0005)),
        ("45", (45.0, 0.5)),
        ("17.3%", (0.173, 0.0005)),
        ("100.0%", (1.0, 0.0005)),
        ("5.47e+03", (5470.0, 5.0)),
        ("2.05e+30", (2.05e30, 5e27)),
        ("---", (None, None)),
    ],
)
def test_a_printed_number_and_its_rounding(printed, expected):
    assert parse_number(printed) == pytest.approx(expected)


def test_text_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="not a number the paper prints: 'n/a'"):
        parse_number("n/a")


def test_headers_read_as_the_workflow_prints_them():
    assert plain(r"OOD $W_1$ $\downarrow$") == "OOD W₁ ↓"
    assert plain(r"\shortstack{total\\draws}") == "total draws"
    assert plain(r"Top-90\% Support Size $\uparrow$") == "Top-90% Support Size ↑"


def test_a_row_with_a_missing_cell_is_an_error():
    tabular = "\\begin{tabular}{lcc}\n\\toprule\nModel & Base & Soft \\\\\n\\midrule\nA & 1 \\\\\n\\bottomrule\n"
    with pytest.raises(ValueError, match="x: a row of 2 cells under 3 columns"):
        parse_tabular(tabular, "x")


def test_the_committed_file_is_what_the_extractor_reads():
    # after a change to the extractor: calibft reference reference/paper_tables.tex > reference/paper.csv
    committed = (REPO / "reference" / "paper.csv").read_text()
    assert committed == to_csv(CELLS)
    assert list(read_csv(committed)) == CELLS
