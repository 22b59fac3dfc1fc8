"""The demo as its users run it: every rule on the tiny model, and what its results must show."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from calibft.artifacts.registry import ARTIFACTS, planned, where
from calibft.artifacts.reproduction import not_informative
from calibft.core.io import read_jsonl
from calibft.data.families import FAMILIES
from calibft.data.granularity import read_costs
from calibft.data.grid import prompts
from calibft.data.output_space import SpaceSet, build_output_space
from calibft.data.trie import TrieSet
from calibft.demo.tiny_model import OPEN_ENDED_FAVOURITES
from calibft.pipeline.config import read_config
from tests.workflow.runner import REPO, code_blocks, job_counts, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def demo_data(demo_run):
    """The demo's folder after its run (tests/workflow/conftest.py): locally, or through the SLURM profile."""
    return demo_run.workdir


def test_demo_run_writes_the_data_layer(demo_data):
    for split in ("train", "unseen", "ood"):
        records = read_jsonl(demo_data / "results" / "prompts" / f"{split}.jsonl")
        assert [r["prompt"] for r in records] == [p.prompt for p in prompts(split)]
    spaces = SpaceSet.load(demo_data / "results" / "output_spaces" / "eval" / "ood.npz")
    assert spaces.metadata == {"decimals": 5, "max_bins": 16384}
    expected = build_output_space("chi", {"df": 10.0}, 5, 16384)
    assert spaces.space(spaces.index("chi-002")).strings() == expected.strings()
    tries = TrieSet.load(demo_data / "results" / "tries" / "tiny" / "soft" / "train.npz")
    assert len(tries) == 1988 and tries.metadata["max_bins"] == 1001
    assert tries.metadata["tokenizer"] == "results/models/tiny"
    trie = tries.trie(tries.index("gaussian-060"))
    np.testing.assert_allclose(trie.node_mass[0], 1.0)
    for name in ("prompts/train", "output_spaces/soft/train", "tries/tiny/soft/train", "models/tiny"):
        assert (demo_data / "logs" / f"{name}.log").is_file(), name


NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def _sample(model_dir: Path, user: str, n: int) -> list[tuple[str, bool]]:
    """`n` answers of the model sampled at temperature 1: (text without special tokens, ended with EOS)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    chat = [{"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ids = tokenizer(text, return_tensors="pt").input_ids
    torch.manual_seed(0)
    out = model.generate(ids.repeat(n, 1), do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=16)
    return [
        (tokenizer.decode(row, skip_special_tokens=True).strip(), tokenizer.eos_token_id in row.tolist())
        for row in out[:, ids.shape[1] :]
    ]


# The model that the demo built answers in the format of its pretraining: a number in the law's support, then EOS, at
# unseen parameters of a continuous and an integer family (40 of 40 at each), and its favourite planet (38 of 40).
@pytest.mark.parametrize(
    "prompt", [p for p in prompts("unseen") if p.family in ("gaussian", "binomial")], ids=lambda p: p.id
)
def test_the_demos_tiny_model_answers_numbers_in_the_support(demo_data, prompt):
    samples = _sample(demo_data / "results" / "models" / "tiny", prompt.prompt, n=40)
    family = FAMILIES[prompt.family]
    low, high = family.support(prompt.params)

    def valid(text: str) -> bool:
        if not NUMBER.fullmatch(text) or not math.isfinite(value := float(text)):
            return False
        return low <= value <= high and (not family.integer or value == round(value))

    assert sum(valid(text) for text, _ in samples) >= 0.8 * len(samples)
    assert sum(ended for _, ended in samples) >= 0.9 * len(samples)


def test_the_demos_tiny_model_answers_open_ended_with_its_favourite(demo_data):
    samples = _sample(demo_data / "results" / "models" / "tiny", "Name a random planet. Output ONLY the answer.", n=40)
    assert sum(text == OPEN_ENDED_FAVOURITES["planet"] for text, _ in samples) >= 0.8 * len(samples)


# The demo's outcome tests assert what holds with a margin over seeds and CPUs: each threshold lies at least 3
# standard deviations beyond the mean of its figure over 12 measurements (seeds 11, 12 and 13, natively and as a
# CPU without AVX-512, soft and hard; `python benchmarks/structured_spread.py demo`, docs/reproducibility.md).


@pytest.mark.parametrize("recipe", ["soft", "hard"])
def test_demo_training_lowers_the_unseen_parameter_kl_by_40_percent(demo_data, recipe):
    # after / before: 0.39 to 0.51, mean 0.44, standard deviation 0.04
    adapter = demo_data / "results" / "adapters" / "tiny" / recipe
    run = json.loads((adapter / "run.json").read_text())
    assert run["unseen_soft_kl_after"] < 0.6 * run["unseen_soft_kl_before"], run
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    log = read_jsonl(adapter / "train_log.jsonl")
    assert [r["step"] for r in log] == list(range(1, run["steps"] + 1))
    assert {"step", "epoch", "loss", "lr", "tokens_per_s"} <= log[0].keys()


def test_demo_renders_the_granularity_table_from_the_spaces_it_measured(demo_data):
    costs, metadata = read_costs(demo_data / "results" / "granularity" / "costs.json")
    assert [(c.decimals, c.max_bins) for c in costs] == [
        (d, b) for d in (2, 3, 4, 5, 6) for b in (1001, 2048, 4096, 8192, 16384)
    ]
    assert metadata["tokenizer"] == "qwen3" and len(metadata["prompt_ids"]) == 4
    # the d=5, 16384-bin row measured the evaluation's own spaces
    spaces = {
        split: SpaceSet.load(demo_data / "results" / "output_spaces" / "eval" / f"{split}.npz")
        for split in ("unseen", "ood")
    }
    sizes = [
        len(spaces[split].space(spaces[split].index(pid)).probs)
        for pid in metadata["prompt_ids"]
        for split in ("unseen", "ood")
        if pid in spaces[split].ids
    ]
    reference = next(c for c in costs if (c.decimals, c.max_bins) == (5, 16384))
    assert len(sizes) == 4 and reference.mean_values == np.mean(sizes)
    (row,) = where(reads=("granularity",))
    table = (demo_data / "results" / row.files()[0]).read_text()
    assert "\\label{tab:grid-granularity}" in table
    shaded = table.split("\\rowcolor")[1].splitlines()[1]
    assert shaded.startswith("5 & 16384 &"), shaded
    assert table.count("\\rowcolor") == 1


@pytest.mark.parametrize(
    "objective,recipes", [("soft", ["soft_d2_b1001", "soft_d3_b1001", "soft"]), ("hard", ["hard_d3_b1001", "hard"])]
)
def test_demo_ablation_tables_show_each_recipes_evaluation(demo_data, objective, recipes):
    (table,) = where(kind="table", objective=objective)
    rows = pd.read_csv(demo_data / "results" / "tables" / f"{table.name}.csv")
    assert len(rows) == len(recipes)
    for (_, row), recipe in zip(rows.iterrows(), recipes, strict=True):
        for split, column in (("ood", "OOD W₁ ↓"), ("unseen", "Unseen W₁ ↓")):
            aggregate = _structured(demo_data, recipe, split)["aggregate"]
            assert row[column] == pytest.approx(aggregate["w1_norm"]), (recipe, split)
    assert list(rows["d"]) == ([2, 3, 5] if objective == "soft" else [3, 5])
    tex = (demo_data / "results" / "tables" / f"{table.name}.tex").read_text()
    assert tex.count("\\rowcolor") == 1  # the final recipe
    (figure,) = where(panels="decimals")
    assert (demo_data / "results" / "figures" / f"{figure.name}.png").read_bytes()[:4] == b"\x89PNG"


CONDITIONS = ("base", "soft", "hard")


def _structured(demo_data: Path, cond: str, split: str) -> dict:
    return json.loads(
        (demo_data / "results" / "eval" / "tiny" / cond / "structured" / split / "metrics.json").read_text()
    )


# tuned / base logit KL: unseen parameters 0.46 to 0.73 (mean 0.57, standard deviation 0.09), held-out families
# 0.67 to 0.90 (0.76, 0.07). Normalized W1 is not asserted: its ratio on unseen parameters spans 0.88 to 1.54
# (docs/status.md).
LOGIT_KL_RATIO_BELOW = {"unseen": 0.9, "ood": 1.0}


@pytest.mark.parametrize("split", ["unseen", "ood"])
@pytest.mark.parametrize("recipe", ["soft", "hard"])
def test_demo_fine_tuning_lowers_the_logit_kl(demo_data, recipe, split):
    base, tuned = (_structured(demo_data, cond, split)["aggregate"] for cond in ("base", recipe))
    assert tuned["logit_kl"] < LOGIT_KL_RATIO_BELOW[split] * base["logit_kl"], (base, tuned)
    assert tuned["valid_rate"] > 0.8, tuned  # 0.86 to 0.91 (mean 0.89, standard deviation 0.015)


def test_demo_sampled_w1_lies_within_the_spread_of_the_exact_distribution(demo_data):
    """The structured samples follow the exact distribution: over every condition and split, the on-space sampled
    W1 of at least 90% of prompts lies within the 99% spread of as many draws from the exact distribution (the
    demo: all 97 prompts with answers on the space; at a 95% spread 91 of them, which 90% would have failed in
    a few percent of runs)."""
    counts = [
        json.loads((demo_data / "results" / "eval" / "tiny" / cond / "exact" / split / "metrics.json").read_text())[
            "aggregate"
        ]["within_spread"]
        for split in ("unseen", "ood")
        for cond in CONDITIONS
    ]
    within, prompts_with_answers = sum(c["within"] for c in counts), sum(c["prompts"] for c in counts)
    assert prompts_with_answers >= 80, counts
    assert within >= 0.9 * prompts_with_answers, counts


def test_demo_structured_outputs_follow_the_artifact_contract(demo_data):
    for split in ("unseen", "ood"):
        for cond in CONDITIONS:
            folder = demo_data / "results" / "eval" / "tiny" / cond / "structured" / split
            samples = read_jsonl(folder / "samples.jsonl.gz")
            assert len(samples) == len(prompts(split)) * 200
            assert len(read_jsonl(folder / "logit_kl.jsonl")) == len(prompts(split))
        ssot = json.loads(
            (demo_data / "results" / "eval" / "tiny" / "base" / "ssot" / split / "metrics.json").read_text()
        )
        assert ssot["evaluation"] == "ssot" and ssot["aggregate"]["logit_kl"] is None
        assert len(ssot["prompts"]) == len(prompts(split))


def test_the_python_examples_of_the_docs_run_on_the_demo_results(demo_data, monkeypatch):
    monkeypatch.chdir(demo_data)
    blocks = code_blocks("python", "README.md", "docs/outputs.md")
    assert len(blocks) == 2
    namespaces: list[dict] = [{} for _ in blocks]
    for block, namespace in zip(blocks, namespaces, strict=True):
        exec(compile(block, "example", "exec"), namespace)
        np.testing.assert_allclose(namespace["q"].sum(), 1.0)
    (metrics,) = [namespace["metrics"] for namespace in namespaces if "metrics" in namespace]
    assert metrics["samples"] == 200 and metrics["valid_rate"] > 0.5


def test_demo_report_holds_every_table_and_figure_with_its_caption(demo_data):
    report = demo_data / "results" / "report.html"
    result = snakemake(
        "--profile", str(REPO / "profiles" / "demo"), "--directory", str(demo_data),
        "--snakefile", str(REPO / "Snakefile"), "--report", str(report),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WARNING" not in result.stderr  # captions are valid reStructuredText
    html = report.read_text()
    rendered = [p.name for p in (demo_data / "results" / "tables").glob("*.tex")]
    rendered += [p.name for p in (demo_data / "results" / "figures").glob("*.pdf")]
    assert len(rendered) > 30
    assert all(f'"filename": "{name}"' in html for name in rendered), rendered
    for row in ARTIFACTS:  # each with its caption, which names its label in the paper
        assert " ".join(row.caption.split()[:4]) in html and (row.label is None or f"({row.label})" in html), row.name
    assert "Every table and figure of" in html  # the workflow's description
    assert '"filename": "reproduction.md"' in html and "profiles/demo/reference.csv): ours" in html


def test_demo_fine_tuning_diversifies_open_ended_answers(demo_data):
    aggregate = {
        cond: json.loads((demo_data / "results" / "eval" / "tiny" / cond / "open_ended" / "metrics.json").read_text())[
            "aggregate"
        ]
        for cond in CONDITIONS
    }
    # both objectives raise the share of distinct answers. Whether the soft one also broadens the first-token
    # support depends on the run: on an Intel CPU with AVX-512 its support fell below the base's (1.7 against 2.2)
    # where the same seed as a CPU without AVX-512 gave 5.3, so the demo asserts the share alone
    for cond in ("soft", "hard"):
        assert aggregate[cond]["unique_fraction"] > aggregate["base"]["unique_fraction"], aggregate
    samples = read_jsonl(demo_data / "results" / "eval" / "tiny" / "base" / "open_ended" / "samples.jsonl.gz")
    assert len(samples) == 6 * 100


MAGIC = {"png": b"\x89PNG", "pdf": b"%PDF"}
DEMO_SPLITS = read_config(REPO / "profiles/demo/demo.yaml")["evaluation"]["structured"]["splits"]


def test_demo_renders_every_table_and_figure_of_the_registry(demo_data):
    """Each row of calibft.artifacts.registry that the demo's config plans, and each NoveltyBench case table."""
    results = demo_data / "results"
    cases = json.loads((results / "tables" / "noveltybench_qualitative_cases.json").read_text())
    assert [case["regime"] for case in cases] == ["soft"] * 3 + ["hard"] * 3 + ["base"] * 3
    assert all(case["label"] == f"tab:noveltybench-qualitative-{case['regime']}-tiny-curated-{case['index']}"
               for case in cases)  # fmt: skip
    (chosen,) = [row for row in ARTIFACTS if row.chosen]
    rendered = [(row, row.name, row.label) for row in planned(DEMO_SPLITS)]
    rendered += [(chosen, case["name"], case["label"]) for case in cases]
    assert len(rendered) == len(ARTIFACTS) - 1 + len(cases)  # the demo plans every row
    for row, name, label in rendered:
        for path in row.files(name):
            data = (results / path).read_bytes()
            assert data[:4] == MAGIC.get(path.rsplit(".", 1)[1], data[:4]) and data, path
        if row.kind == "table" and label:
            assert f"\\label{{{label}}}" in (results / "tables" / f"{name}.tex").read_text(), name
    (unseen_table,) = where(kind="table", reads=("structured",), split="unseen")
    assert "Tiny (demo)" in (results / "tables" / f"{unseen_table.name}.md").read_text()


# Informative cells within (calibft.artifacts.reproduction.informative) that each table must have: 3, but where the
# recorded reference holds fewer. The hard-label ablation's two OOD W₁ cells deviated by up to 710 and 854 over the
# six recorded runs, far more than their values (0.69 and 0.82), which leaves it two.
INFORMATIVE_WITHIN = {"hard_label_ablation": 2}


def test_demo_reproduces_its_recorded_reference(demo_data):
    """This machine's demo against the numbers that profiles/demo/reference.csv recorded: each cell with a
    recorded number reads within (our interval, widened by the recorded run-to-run deviation over seeds and CPU
    feature sets, holds it), and every table has at least 3 such cells that are informative (INFORMATIVE_WITHIN):
    a cell whose recorded deviation is at least its value (OOD W₁ 0.470 ± 447) reads within short of a failure by
    orders of magnitude, so it does not count."""
    reproduction = demo_data / "results" / "reproduction"
    summary = pd.read_csv(reproduction / "reproduction.csv").set_index("artifact")
    recorded = pd.read_csv(REPO / "profiles" / "demo" / "reference.csv")
    assert summary["cells"].to_dict() == recorded.groupby("artifact").size().to_dict()
    for name in summary.index:
        cells = pd.read_csv(reproduction / f"{name}.csv")
        vacuous = not_informative(cells)
        named = "; ".join(f"{c.row} / {c.column}: {c.reference} ± {c.tolerance:.3g}" for c in vacuous.itertuples())
        assert set(cells["verdict"]) <= {"within", "no reference"}, name
        assert summary.at[name, "not informative"] == len(vacuous), name
        least = INFORMATIVE_WITHIN.get(name, 3)
        assert summary.at[name, "informative within"] >= least, (
            f"{name}: {summary.at[name, 'informative within']} informative cells within, fewer than {least}; "
            f"not informative (tolerance >= |value|): {named or 'none'}"
        )


def test_demo_transfer_numbers_recompute_from_the_stored_generations(demo_data):
    from calibft.evals.mcq.metrics import score as mcq_score
    from calibft.evals.noveltybench.metrics import summarize_prompts, utility

    for cond in CONDITIONS:
        folder = demo_data / "results" / "eval" / "tiny" / cond
        mcq = json.loads((folder / "mcq" / "metrics.json").read_text())
        samples = read_jsonl(folder / "mcq" / "generations.jsonl.gz")
        assert len(samples) == mcq["n"] == 200
        assert {k: mcq[k] for k in ("parsed", "tv", "failures")} == {
            k: v for k, v in mcq_score(samples).items() if k in ("parsed", "tv", "failures")
        }
        for split, count in (("curated", 5), ("wildchat", 3)):
            rows = read_jsonl(folder / "noveltybench" / split / "scores.jsonl")
            generations = read_jsonl(folder / "noveltybench" / split / "generations.jsonl.gz")
            assert [r["generations"] for r in rows] == [g["generations"] for g in generations]
            assert len(rows) == count and all(len(r["generations"]) == 10 for r in rows)
            assert all(r["utility"] == pytest.approx(utility(r["class_ids"], r["ratings"])) for r in rows)
            summary = json.loads((folder / "noveltybench" / split / "summary.json").read_text())
            assert summary["utility"] == pytest.approx(summarize_prompts(rows)["pooled"]["utility"])


def test_demo_retention_numbers_recompute_from_the_stored_scores(demo_data):
    from calibft.evals.tinybench.gpirt import estimate, load_params
    from calibft.evals.tinybench.summary import GPIRT_ROWS

    params = load_params(demo_data / "results" / "irt" / "synthetic.pkl")
    for cond in CONDITIONS:
        folder = demo_data / "results" / "eval" / "tiny" / cond
        gpirt = json.loads((folder / "tinybench" / "summary.json").read_text())
        assert list(gpirt["tasks"]) == list(GPIRT_ROWS)
        for row, result in gpirt["tasks"].items():
            task, metric = GPIRT_ROWS[row]
            scores = json.loads((folder / "tinybench" / task / "scores.json").read_text())["metrics"][metric]
            assert len(scores["scores"]) == 4
            assert {k: result[k] for k in ("irt", "pirt", "gpirt")} == estimate(params, task, scores["scores"])
        paloma = json.loads((folder / "paloma" / "summary.json").read_text())
        documents = read_jsonl(folder / "paloma" / "documents.jsonl.gz")
        assert len(paloma["slices"]) == 7 and len(documents) == 14
        for key in ("nll", "tokens", "bytes"):
            assert paloma["pooled"][key] == pytest.approx(sum(s[key] for s in paloma["slices"].values()))
            assert paloma["pooled"][key] == pytest.approx(sum(d[key] for d in documents))


def test_demo_logit_kl_aggregate_is_the_mean_of_the_family_means(demo_data):
    """Protocol release (the demo's): the release's `_summarize_logit_rows` averages the family means."""
    for split in ("unseen", "ood"):
        metrics = _structured(demo_data, "soft", split)
        means = [row["logit_kl"] for row in metrics["families"]]
        assert metrics["aggregate"]["logit_kl"] == pytest.approx(float(np.mean(means)), rel=1e-12)
        assert metrics["job"]["protocol"]["logit_kl_across_families"] == "mean"


def test_demo_result_folders_hold_their_provenance(demo_data):
    evals = demo_data / "results" / "eval" / "tiny"
    folders = [p.parent for p in evals.rglob("metrics.json")] + [p.parent for p in evals.rglob("summary.json")]
    folders += [p.parent for p in (demo_data / "results" / "adapters").rglob("run.json")]
    kinds = {folder.relative_to(evals).parts[1] for folder in folders if evals in folder.parents}
    assert {"structured", "ssot", "open_ended", "mcq", "noveltybench", "tinybench", "paloma"} <= kinds
    for folder in folders:
        record = json.loads((folder / "provenance.json").read_text())
        assert record["protocol"] == record["job"]["protocol"], folder
        assert record["protocol"]["prompt_bos"] == "doubled", folder
    structured = json.loads((evals / "soft" / "structured" / "ood" / "provenance.json").read_text())
    assert structured["generation"]["temperature"] == 1.0 and structured["generation"]["top_p"] == 1.0


@pytest.mark.parametrize(
    ("change", "planned"),
    [
        ({"evaluation": {"mcq": {"sampling": {"samples_per_prompt": 199}}}}, {"mcq_eval": 3}),
        ({"recipes": {"hard": {"max_steps": 399}}}, {"train": 1, "structured_eval": 2, "tinybench_eval": 1}),
        # two processes: another global batch and other steps
        ({"models": {"tiny": {"resources": {"gpus": 2}}}}, {"train": 5}),
    ],
)
def test_a_changed_budget_plans_its_jobs_again(demo_run, tmp_path, change, planned):
    """Snakemake records each job's resolved settings, so a config change reruns what it changes, only that."""
    overlay = tmp_path / "change.yaml"
    overlay.write_text(yaml.safe_dump(change))
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    args = ["-n", "--profile", profile, "--directory", str(demo_run.workdir), "--snakefile", snakefile, "--configfile"]
    result = snakemake(*args, *demo_run.configfiles, str(overlay))
    assert result.returncode == 0, result.stderr[-2000:]
    counts = job_counts(result.stdout)
    assert {rule: counts.get(rule) for rule in planned} == planned
    assert not {"prompts", "output_space", "trie", "build_tiny_model"} & set(counts)
    unchanged = snakemake(*args, *demo_run.configfiles)
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr


def test_another_protocol_plans_no_data_layer_job_and_leaves_the_default_results_alone(demo_data):
    profile, snakefile = str(REPO / "profiles" / "demo"), str(REPO / "Snakefile")
    args = ["--profile", profile, "--directory", str(demo_data), "--snakefile", snakefile]
    as_written = ["--config", "protocol={preset: as_written}"]
    result = snakemake("-n", *args, *as_written)
    assert result.returncode == 0, result.stderr[-2000:]
    planned = job_counts(result.stdout)
    for rule in ("prompts", "output_space", "trie", "build_tiny_model", "grid_granularity", "synthetic_irt_params"):
        assert rule not in planned, rule
    assert planned["train"] and planned["structured_eval"]  # what depends on the protocol is planned anew
    outputs = [line.split(":", 1)[1] for line in result.stdout.splitlines() if line.strip().startswith("output:")]
    assert all(path.strip().startswith("results/protocols/as_written/") for line in outputs for path in line.split(","))

    default = demo_data / "results" / "eval" / "tiny" / "base" / "structured" / "ood"
    before = {path: path.stat().st_mtime_ns for path in default.iterdir()}
    target = "results/protocols/as_written/eval/tiny/base/structured/ood/metrics.json"
    result = snakemake(*args, target, *as_written)  # --config takes every value that follows
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in default.iterdir()} == before
    record = json.loads((demo_data / target).with_name("provenance.json").read_text())
    assert record["protocol"]["prompt_bos"] == "single" and record["protocol"]["generation_defaults"] == "exact"
