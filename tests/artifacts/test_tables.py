import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibft.artifacts.config_tables import (
    AXES_OF_PARAMS,
    BENCHMARK_ROWS,
    benchmark_distributions,
    config_tables,
    method_hyperparams,
    optimizer_steps,
    shared_hyperparams,
    training_hardware,
)
from calibft.artifacts.formats import format_number
from calibft.artifacts.tables import Table, latex_escape, table_name, to_latex, to_markdown, write_table
from calibft.data.families import FAMILIES
from calibft.data.grid import TRAIN_AXES, UNSEEN_PARAMS
from calibft.pipeline.config import read_config

ROOT = Path(__file__).resolve().parents[2]

PAPER_SHARED = {
    "Fine-tuning method": "LoRA",
    "Training prompts": 1988,
    "Canonical decimals": 5,
    "Continuous quantile range": "[0.001, 0.999]",
    "Tail mass outside range": "Clipped to edge bins",
    "LoRA rank / alpha / dropout": "16 / 32 / 0.05",
    "LoRA target modules": "q_proj, k_proj, v_proj, o_proj",
    "Optimizer": "AdamW",
    "Learning rate": 2e-4,
    "Weight decay": 0.01,
    "LR schedule": "Cosine with 3% linear warmup",
    "Per-device batch size": 8,
    "Gradient accumulation": 1,
    "Training GPUs": "4 A100 GPUs with FSDP",
    "Max sequence length": "256 tokens",
    "Model/load precision": "bf16",
    "Batching": "Family-balanced",
}


@pytest.fixture(scope="module")
def paper_config() -> dict:
    return read_config(ROOT / "config.yaml")


@pytest.fixture(scope="module")
def written(paper_config, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tables")
    for table in config_tables(paper_config):
        write_table(table, directory)
    return directory


def _rows(frame: pd.DataFrame) -> dict:
    return dict(zip(frame.iloc[:, 0], frame.iloc[:, 1], strict=True))


# ---------------------------------------------------------------------------------------------- paper values


def test_shared_hyperparams_are_the_papers(paper_config):
    assert _rows(shared_hyperparams(paper_config)) == PAPER_SHARED


def test_method_hyperparams_are_the_papers(paper_config):
    frame = method_hyperparams(paper_config)
    assert list(frame.columns) == ["Parameter", "Soft", "Hard"]
    assert frame.set_index("Parameter").to_dict("index") == {
        "Objective": {"Soft": "Trie-induced KL", "Hard": "Completion CE"},
        "Maximum output-space bins": {"Soft": 1001, "Hard": 16384},
        "Epochs": {"Soft": 3, "Hard": 2},
        "Sampled completions per prompt per epoch": {"Soft": 1, "Hard": 16},
        "Optimizer steps per model": {"Soft": 189, "Hard": 1988},
        "Loss temperature": {"Soft": "τ=1.0", "Hard": "N/A"},
    }


def test_optimizer_steps():
    training = {"per_device_batch_size": 8, "gradient_accumulation": 1}
    soft = {"epochs": 3, "samples_per_prompt": 1}
    hard = {"epochs": 2, "samples_per_prompt": 16}
    assert optimizer_steps(1988, soft, training, world=4) == 3 * 63  # ceil(ceil(1988 / 4) / 8)
    assert optimizer_steps(1988, hard, training, world=4) == 2 * 994
    assert optimizer_steps(1988, soft, training, world=1) == 3 * 249  # the last batch is partial
    assert optimizer_steps(10, soft, training, world=3) == 3  # 4 items per rank: one batch
    assert optimizer_steps(1988, {**hard, "max_steps": 400}, training, world=1) == 400


def test_training_hardware():
    assert training_hardware({"gpus": 4, "gpu_model": "a100"}, "fsdp") == "4 A100 GPUs with FSDP"
    assert training_hardware({"gpus": 1, "gpu_model": "h100"}, "fsdp") == "1 H100 GPU"
    assert training_hardware({"gpus": 2}, "ddp") == "2 GPUs with DDP"
    assert training_hardware({"gpus": 0}, "ddp") == "CPU"


def test_values_come_from_the_config(paper_config):
    config = copy.deepcopy(paper_config)
    config["training"].update(learning_rate=1e-3, warmup_fraction=0.05, per_device_batch_size=4, precision="fp32")
    config["training"]["lora"].update(r=8, alpha=16, target_modules=["q_proj"])
    config["models"] = {"tiny": {"display": "Tiny", "resources": {"gpus": 0}}}
    config["recipes"]["hard"]["max_steps"] = 400
    config["recipes"]["soft_d3"] = {"objective": "soft", "space": "d3", "epochs": 1, "samples_per_prompt": 1}
    config["output_spaces"]["d3"] = {"decimals": 3, "max_bins": 300, "splits": ["train"]}
    recipes = ["soft", "hard", "soft_d3"]
    shared = _rows(shared_hyperparams(config, recipes))
    assert shared["Learning rate"] == 1e-3 and shared["LR schedule"] == "Cosine with 5% linear warmup"
    assert shared["LoRA rank / alpha / dropout"] == "8 / 16 / 0.05" and shared["LoRA target modules"] == "q_proj"
    assert shared["Training GPUs"] == "CPU" and shared["Model/load precision"] == "fp32"
    assert shared["Canonical decimals"] == "soft: 5; hard: 5; soft_d3: 3"
    # by default the final recipes, those the evaluation's conditions name; the ablations' are not shown
    assert _rows(shared_hyperparams(config))["Canonical decimals"] == 5
    assert list(method_hyperparams(config).columns) == ["Parameter", "Soft", "Hard"]
    method = method_hyperparams(config, recipes).set_index("Parameter")
    assert list(method.columns) == ["Soft", "Hard", "Soft d3"]
    # a recipe's max_steps cut is shown beside the epochs' count, which the caption's formula gives
    assert method.loc["Optimizer steps per model"].tolist() == [
        3 * 497,
        f"400 (max_steps; {2 * 16 * 497} uncapped)",
        497,
    ]
    assert method.loc["Maximum output-space bins", "Soft d3"] == 300


def test_steps_that_differ_between_models_are_listed(paper_config):
    config = copy.deepcopy(paper_config)
    config["models"] = {
        "a": {"display": "A", "resources": {"gpus": 4, "gpu_model": "a100"}},
        "b": {"display": "B", "resources": {"gpus": 1, "gpu_model": "a100"}},
    }
    method = method_hyperparams(config, ["soft"]).set_index("Parameter")
    assert method.loc["Optimizer steps per model", "Soft"] == "A: 189; B: 747"
    assert _rows(shared_hyperparams(config))["Training GPUs"] == "A: 4 A100 GPUs with FSDP; B: 1 A100 GPU"


def test_benchmark_distributions():
    frame = benchmark_distributions()
    assert len(frame) == 30 and frame["Held out"].sum() == 6
    assert sorted(BENCHMARK_ROWS) == sorted(FAMILIES)  # every family once
    # the paper's row order: Chi before Chi-Square, TruncNorm (tier II) among the tier-III rows
    assert list(frame["Distribution"][11:22]) == [
        "Poisson", "Maxwell", "Cauchy", "Student's t", "Chi", "Chi-Square", "F-Distribution", "Gamma", "Weibull",
        "TruncNorm", "Laplace",
    ]  # fmt: skip
    assert list(frame["Tier"][:14]) == [1] * 3 + [2] * 10 + [3]
    assert frame.groupby("Tier").size().to_dict() == {1: 3, 2: 11, 3: 16}
    rows = frame.set_index("Distribution")
    assert rows.loc["Uniform", "Training region"] == "a ∈ [-5, 2] (11) × w ∈ [1, 5] (11)"
    assert rows.loc["Uniform", "Test configurations"] == "a=3.5, w=7"  # b = a + width = 10.5
    assert rows.loc["Gaussian", "Training region"] == "μ ∈ [-2, 2] (11) × σ ∈ [0.5, 2] (11, log)"
    assert rows.loc["Binomial", "Training region"].startswith("n ∈ {5, 10, 15, 20} × p ∈ {0.2, 0.25,")
    assert rows.loc["Triangular", "Test configurations"] == "a=2.5, w=7, f_mode=0.5"
    assert rows.loc["Hypergeometric", "Test configurations"] == "M=100, N=20, K/M=0.5"
    assert rows.loc["Weibull", "Training region"] == "held out"
    assert rows.loc["Weibull", "Test configurations"] == "k=0.5, λ=0.5; k=1.5, λ=1.5; k=3, λ=3"
    assert rows.loc["Maxwell", "Test configurations"] == "σ=0.75; σ=1.5; σ=2.5"  # the paper's symbols
    assert rows.loc["Chi", "Test configurations"] == "ν=2; ν=5; ν=10"
    assert rows.loc["TruncNorm", "Test configurations"].startswith("μ=0, σ=1, a=-1, b=1; ")
    assert rows.loc["Weibull", "SciPy name"] == "weibull_min"
    held_out = rows[rows["Training region"] == "held out"]
    assert set(held_out.index) == {f.display for f in FAMILIES.values() if f.held_out}


@pytest.mark.parametrize("family_id", sorted(AXES_OF_PARAMS))
def test_test_configurations_are_in_the_grids_coordinates(family_id):
    axes, derive = TRAIN_AXES[family_id]
    params = dict(UNSEEN_PARAMS)[family_id]
    shown = AXES_OF_PARAMS[family_id](params)
    assert list(shown) == [name for name, _ in axes]
    assert derive(shown) == pytest.approx(params)


# ---------------------------------------------------------------------------------------------- files


def test_files_are_written(written):
    names = {"shared_hyperparams", "method_hyperparams", "benchmark_distributions"}
    assert {p.name for p in written.iterdir()} == {f"{n}.{s}" for n in names for s in ("tex", "csv", "md")}


def test_csv_round_trips_the_numbers(written, paper_config):
    shared = pd.read_csv(written / "shared_hyperparams.csv").set_index("Parameter")["Value"]
    assert float(shared["Learning rate"]) == 2e-4 and int(shared["Training prompts"]) == 1988
    assert shared["LoRA target modules"] == "q_proj, k_proj, v_proj, o_proj"
    method = pd.read_csv(written / "method_hyperparams.csv").set_index("Parameter")
    assert int(method.loc["Optimizer steps per model", "Soft"]) == 189
    assert int(method.loc["Optimizer steps per model", "Hard"]) == 1988
    families = pd.read_csv(written / "benchmark_distributions.csv")
    pd.testing.assert_frame_equal(families, benchmark_distributions().drop(columns="Held out"))


def _md_cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |"), line
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line[1:-1])]


@pytest.mark.parametrize(
    "name, header",
    [
        ("shared_hyperparams", ["Parameter", "Value"]),
        ("method_hyperparams", ["Parameter", "Soft", "Hard"]),
        ("benchmark_distributions", ["Tier", "Distribution", "SciPy name", "Training region", "Test configurations"]),
    ],
)
def test_markdown_is_a_table(written, name, header):
    lines = (written / f"{name}.md").read_text().splitlines()
    assert _md_cells(lines[0]) == header
    assert all(re.fullmatch(r":?-{3,}:?", cell) for cell in _md_cells(lines[1]))
    body = [_md_cells(line) for line in lines[2:]]
    assert all(len(cells) == len(header) for cells in body)
    assert len(body) == {"shared_hyperparams": 17, "method_hyperparams": 6, "benchmark_distributions": 30}[name]


def test_latex_drops_into_the_paper(written):
    shared = (written / "shared_hyperparams.tex").read_text()
    for piece in [r"\begin{tabular}{@{}ll@{}}", r"\toprule", r"\midrule", r"\bottomrule", r"\caption{Shared"]:
        assert piece in shared
    assert r"\label{tab:shared-hyperparams}" in shared
    assert r"q\_proj, k\_proj, v\_proj, o\_proj" in shared and r"Cosine with 3\% linear warmup" in shared
    assert r"Learning rate & \ensuremath{2 \times 10^{-4}} \\" in shared
    method = (written / "method_hyperparams.tex").read_text()
    assert r"Optimizer steps per model & 189 & 1988 \\" in method
    assert r"Loss temperature & \ensuremath{\tau}=1.0 & N/A \\" in method
    families = (written / "benchmark_distributions.tex").read_text()
    assert families.startswith("%") and r"\begin{table*}" in families and r"\end{table*}" in families
    assert families.count(r"\rowcolor") == 6 and r"\texttt{weibull\_min}" in families
    for text in (shared, method, families):
        assert text.count("{") == text.count("}") + text.count(r"\{") - text.count(r"\}")
        assert not re.search(r"[^\x00-\x7f]", text), "non-ASCII characters left in the LaTeX"


# ---------------------------------------------------------------------------------------------- the writer


def test_table_names():
    assert table_name("tab:main-ood") == "main_ood"
    assert (
        table_name("tab:noveltybench-qualitative-soft-qwen3-curated-7")
        == "noveltybench_qualitative_soft_qwen3_curated_7"
    )
    with pytest.raises(ValueError):
        table_name("fig:main-ood")


def test_number_formats():
    assert [format_number(v) for v in (1988, 0.05, 2e-4, 1.0, 1 / 3, 5.47e3, 1.25e7, -3e-5, 0.0)] == [
        "1988", "0.05", "2e-4", "1", "0.333333", "5470", "1.25e7", "-3e-5", "0",
    ]  # fmt: skip
    assert format_number(np.float32(0.5)) == "0.5" and format_number(np.int64(7)) == "7"


def test_latex_escapes_special_characters():
    assert latex_escape(r"a_b & 50% #1 $x {y} ~ ^ \ <>") == (
        r"a\_b \& 50\% \#1 \$x \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{} \textless{}\textgreater{}"
    )
    expected = r"\ensuremath{\mu} \ensuremath{\in} [0, 1] \ensuremath{\times} \ensuremath{\sigma}\ensuremath{_1}"
    assert latex_escape("μ ∈ [0, 1] × σ₁ ↓") == expected + r" \ensuremath{\downarrow}"
    assert latex_escape("Q₉₅ - Q₀₅") == r"Q\ensuremath{_{95}} - Q\ensuremath{_{05}}"  # one subscript, not two


def test_two_level_columns_bold_missing_and_formats(tmp_path):
    columns = pd.MultiIndex.from_tuples(
        [("", "Model"), ("W1 ↓", "Base"), ("W1 ↓", "Soft"), ("Valid rate ↑", "Base"), ("Valid rate ↑", "Soft")]
    )
    frame = pd.DataFrame([["Qwen3-0.6B", 0.462, 0.2641, 0.173, 0.841], ["Tiny|demo", np.nan, 1e-5, 1.0, 0.5]])
    frame.columns = columns
    bold = pd.DataFrame(np.zeros(frame.shape, dtype=bool))
    bold.iloc[0, 2] = True
    table = Table(
        frame,
        "tab:main-ood",
        "A 50% caption",
        formats={("Valid rate ↑", "Base"): ".1%", ("Valid rate ↑", "Soft"): ".1%"},
        bold=bold,
        shaded=[False, True],
    )
    paths = write_table(table, tmp_path)
    assert [p.name for p in paths] == ["main_ood.tex", "main_ood.csv", "main_ood.md"]

    tex = paths[0].read_text()
    assert r" & \multicolumn{2}{c}{W1 \ensuremath{\downarrow}} & \multicolumn{2}{c}{Valid rate" in tex
    assert r"\cmidrule(lr){2-3}\cmidrule(lr){4-5}" in tex
    assert r"Model & Base & Soft & Base & Soft \\" in tex
    assert r"Qwen3-0.6B & 0.462 & \textbf{0.2641} & 17.3\% & 84.1\% \\" in tex
    assert (
        r"\rowcolor{black!7}" + "\nTiny|demo & --- & \\ensuremath{1 \\times 10^{-5}} & 100.0\\% & 50.0\\% \\\\" in tex
    )
    assert r"\begin{tabular}{@{}lrrrr@{}}" in tex and r"\caption{A 50\% caption}" in tex

    csv = pd.read_csv(paths[1])
    assert list(csv.columns) == ["Model", "W1 ↓ / Base", "W1 ↓ / Soft", "Valid rate ↑ / Base", "Valid rate ↑ / Soft"]
    assert csv.iloc[0, 2] == 0.2641 and np.isnan(csv.iloc[1, 1]) and csv.iloc[1, 2] == 1e-5

    md = paths[2].read_text().splitlines()
    assert md[0] == "| Model | W1 ↓ / Base | W1 ↓ / Soft | Valid rate ↑ / Base | Valid rate ↑ / Soft |"
    assert md[1] == "| :--- | ---: | ---: | ---: | ---: |"
    assert md[2] == "| Qwen3-0.6B | 0.462 | **0.2641** | 17.3% | 84.1% |"
    assert md[3] == r"| Tiny\|demo | --- | 1e-5 | 100.0% | 50.0% |"


def test_table_checks_its_presentation():
    frame = pd.DataFrame({"a": [1, 2]})
    with pytest.raises(ValueError, match="unknown columns"):
        Table(frame, "tab:x", formats={"b": ".2f"})
    with pytest.raises(ValueError, match="shaded"):
        Table(frame, "tab:x", shaded=[True])
    with pytest.raises(ValueError, match="label"):
        Table(frame, "x")


def test_no_caption_and_code_columns():
    table = Table(pd.DataFrame({"name": ["norm", None], "n": [1, 2]}), "tab:x", code=["name"], font_size=None)
    tex = to_latex(table)
    assert r"\caption" not in tex and r"\small" not in tex and r"\texttt{norm} & 1 \\" in tex and "--- & 2" in tex
    assert to_markdown(table).splitlines()[2:] == ["| `norm` | 1 |", "| --- | 2 |"]


def test_write_is_atomic(tmp_path, monkeypatch):
    table = Table(pd.DataFrame({"a": [1]}), "tab:x")
    write_table(table, tmp_path)
    before = (tmp_path / "x.md").read_text()
    monkeypatch.setattr("calibft.artifacts.tables.to_markdown", lambda t: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_table(Table(pd.DataFrame({"a": [2]}), "tab:x"), tmp_path)
    assert (tmp_path / "x.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv", "x.md", "x.tex"]  # no temporary files left
