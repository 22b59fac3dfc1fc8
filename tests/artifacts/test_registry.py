import inspect
from pathlib import Path

import pytest

from calibft.artifacts.registry import ARTIFACTS, BY_NAME, READS, Artifact, artifact, markdown_table, planned, where
from calibft.artifacts.tables import table_name
from calibft.pipeline.artifact_inputs import RESULT_SETS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "artifacts.md"


def test_names_are_unique_and_follow_the_paper_labels():
    assert len(BY_NAME) == len(ARTIFACTS)
    for row in ARTIFACTS:
        if row.label is None:
            continue
        prefix = {"table": "tab:", "figure": "fig:"}[row.kind]
        assert row.label == prefix + row.name.replace("_", "-"), row.name
        if row.kind == "table":
            assert table_name(row.label) == row.name


@pytest.mark.parametrize("row", ARTIFACTS, ids=lambda row: row.name)
def test_every_renderer_takes_inputs_and_settings(row):
    render = row.render_function()
    assert list(inspect.signature(render).parameters) == ["inputs", "settings"]


def test_files_follow_the_kind():
    assert BY_NAME["main_ood"].files() == ["tables/main_ood.tex", "tables/main_ood.csv", "tables/main_ood.md"]
    assert BY_NAME["method"].files() == ["figures/method.pdf", "figures/method.png"]
    chosen = artifact("noveltybench_qualitative_soft_tiny_curated_0")
    assert chosen.chosen and chosen.files("x") == ["tables/x.tex", "tables/x.csv", "tables/x.md"]
    with pytest.raises(KeyError, match="no artifact named 'main_iid'"):
        artifact("main_iid")


def test_planned_rows_follow_the_evaluated_splits():
    every = planned(["unseen", "ood"])
    assert [row.name for row in every] == [row.name for row in ARTIFACTS if not row.chosen]
    unseen_only = {row.name for row in planned(["unseen"])}
    assert {row.name for row in ARTIFACTS if row.split == "ood"}.isdisjoint(unseen_only)
    assert {"main_unseen", "main_structured_sampling", "grid_ablation"} <= unseen_only
    structured = planned(["unseen", "ood"], structured_only=True)
    assert all(row.structured for row in structured)
    assert {row.section for row in structured} == {"Configuration", "Training", "Structured sampling"}


def test_rows_are_found_by_their_fields_and_options():
    assert where(kind="table", reads=("structured",), split="ood") == [BY_NAME["main_ood"]]
    assert [row.name for row in where(objective="hard")] == ["hard_label_ablation"]
    assert where(kind="figure", objective="soft") == []


def test_docs_list_the_registry():
    # after a change to the registry: python -c "from calibft.artifacts.registry import markdown_table as t; print(t())"
    assert markdown_table() in DOCS.read_text()
    assert markdown_table().count("\n") == len(ARTIFACTS) + 2


def test_a_row_reads_only_known_result_sets():
    with pytest.raises(ValueError, match="reads \\['scores'\\], which are not result sets"):
        Artifact("x", "table", None, "Transfer", ("scores",), "m:f", "caption")
    assert sorted(RESULT_SETS) == sorted(READS)  # what the workflow gives each result set
