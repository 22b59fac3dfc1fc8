"""Each module of calibft has one path, the one in its stage (docs/architecture.md): no file of the repository
names a module by the path it had before the stage packages, and those paths import nothing."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# old path (under calibft.) -> the module's path (under calibft.)
MOVED = {
    "checks": "core.checks",
    "io": "core.io",
    "seeds": "core.seeds",
    "cpu": "core.cpu",
    "ragged": "core.ragged",
    "provenance": "core.provenance",
    "checkpoints": "core.checkpoints",
    "protocol": "core.protocol",
    "time_limit": "core.time_limit",
    "runlog": "core.runlog",
    "families": "data.families",
    "grid": "data.grid",
    "output_space": "data.output_space",
    "trie": "data.trie",
    "granularity": "data.granularity",
    "models": "lm.models",
    "chat": "lm.chat",
    "generation": "lm.generation",
    "generation_defaults": "lm.generation_defaults",
    "packaged": "lm.packaged",
    "packaged_tokenizers": "lm.packaged_tokenizers",
    "gguf_checkpoint": "lm.gguf_checkpoint",
    "exact": "lm.trie_walk",
    "train": "training.train",
    "objectives": "training.objectives",
    "batching": "training.batching",
    "reference": "artifacts.reference",
    "reproduction": "artifacts.reproduction",
    "compute": "artifacts.compute",
    "config": "pipeline.config",
    "layout": "pipeline.layout",
    "jobs": "pipeline.jobs",
    "assets": "pipeline.assets",
    "locks": "pipeline.locks",
    "plan": "pipeline.plan",
    "memory": "pipeline.memory",
    "slurm_states": "pipeline.slurm_states",
    "artifacts.inputs": "pipeline.artifact_inputs",
    "evals.gpirt": "evals.tinybench.gpirt",
    "evals.structured_job": "evals.structured.job",
    "evals.ssot_release": "evals.structured.ssot",
    "evals.exact_structured": "evals.exact",
    "evals.exact_structured_job": "evals.exact.job",
    "evals.exact_bounds": "evals.exact.bounds",
    "evals.mcq_job": "evals.mcq.job",
    "evals.noveltybench_run": "evals.noveltybench.runner",
    "evals.noveltybench_job": "evals.noveltybench.job",
    "evals.open_ended_job": "evals.open_ended.job",
    "evals.paloma_job": "evals.paloma.job",
}

# The code, the workflow (rules, scripts, profiles, environments), the tests, benchmarks and the docs.
SCANNED = (
    *("calibft", "rules", "workflow_scripts", "benchmarks", "tests", "docs", "profiles", "envs", "launch"),
    *("reference", "report", "schemas", "README.md", "CHANGELOG.md", "Makefile", "Snakefile", "pyproject.toml"),
)


def _either(names: list[str]) -> str:
    """A regex alternation of these names, the longest first."""
    return "|".join(map(re.escape, sorted(names, key=len, reverse=True)))


# `calibft.X` (an import, `python -m`, prose) or its file path `calibft/X.py`; `\b` keeps a longer name out
# (`calibft.train` is old, `calibft.training` is not)
DOTTED = re.compile(rf"\bcalibft\.({_either(list(MOVED))})\b")
SLASHED = re.compile(rf"\bcalibft/({_either([old.replace('.', '/') for old in MOVED])})\b")
# `from calibft[.package] import NAME, ...`, on one line or in parentheses
FROM_IMPORT = re.compile(r"\bfrom calibft((?:\.\w+)*) import (\([^)]*\)|[^\n]*)")


def old_paths(text: str) -> list[tuple[int, str]]:
    """(line number, old path) for each old module path that `text` names."""
    text = text.replace("\\.", ".")  # a regular expression's escaped dot names the same path
    found = [(match.start(), match[1]) for match in DOTTED.finditer(text)]
    found += [(match.start(), match[1].replace("/", ".")) for match in SLASHED.finditer(text)]
    for match in FROM_IMPORT.finditer(text):
        package = match[1].removeprefix(".")
        names = re.sub(r"#[^\n]*", "", match[2]).strip("()")  # comments out; `name as alias` keeps `name`
        for name in (entry.split()[0] for entry in names.split(",") if entry.strip()):
            path = f"{package}.{name}" if package else name
            if path in MOVED:
                found.append((match.start(), path))
    return [(text.count("\n", 0, start) + 1, f"calibft.{path}") for start, path in sorted(found)]


def scanned_files() -> list[Path]:
    """The files under `SCANNED` but this one, which holds the old paths as data."""
    files = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        elif path.is_file():
            files.append(path)
    return [path for path in files if path != Path(__file__).resolve()]


def test_no_file_names_an_old_module_path():
    files = scanned_files()
    assert {ROOT / "README.md", ROOT / "rules" / "eval.smk", ROOT / "calibft" / "cli.py"} <= set(files)
    offenders = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file (a tokenizer, an archive) names no module
            continue
        for number, old in old_paths(text):
            offenders.append(f"{path.relative_to(ROOT)}:{number}: {old}, now calibft.{MOVED[old[len('calibft.') :]]}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_the_scan_finds_each_old_path_and_passes_its_new_one(old, new):
    as_file = old.replace(".", "/")
    for text in (f"import calibft.{old}", f"python -m calibft.{old}", f"`calibft.{old}`.", f"calibft/{as_file}.py"):
        assert old_paths(text) == [(1, f"calibft.{old}")], text
    for text in (f"import calibft.{new}", f"python -m calibft.{new} JOB", f"calibft/{new.replace('.', '/')}.py"):
        assert old_paths(text) == [], text


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("from calibft import trie as trie_module", ["calibft.trie"]),
        ("x = 1\nfrom calibft import (\n    cli,\n    grid,  # the prompts\n    lm,\n)", ["calibft.grid"]),
        ("from calibft.artifacts import inputs  # noqa: E402", ["calibft.artifacts.inputs"]),
        ("from calibft.evals import bootstrap, gpirt", ["calibft.evals.gpirt"]),
        ("calibft.train.main(job) and calibft.memory.scoring_memory", ["calibft.train", "calibft.memory"]),
        ("calibft/artifacts/inputs.py", ["calibft.artifacts.inputs"]),
        (r"re.findall(r'-m calibft\.evals\.gpirt (\{.*\})', text)", ["calibft.evals.gpirt"]),
        ("from calibft import cli\nfrom calibft.data import trie\nfrom calibft.artifacts import reference", []),
        ("from calibft import cli  # its commands, trie and grid among them", []),
        ("calibft.artifacts.registry, calibft.evals.tinybench.gpirt, calibft.training, envs/calibft.yaml", []),
        ("calibft.pipeline.artifact_inputs, calibft.lm.trie_walk, calibft.evals.gpirt_params", []),
    ],
)
def test_the_scan_reads_imports_from_a_package_and_tells_prefixes_apart(text, found):
    assert [old for _, old in old_paths(text)] == found


def test_the_scan_gives_the_line():
    assert old_paths("a\nb\nfrom calibft.runlog import log_to\n") == [(3, "calibft.runlog")]
    assert old_paths("from calibft import (\n    cli,\n    runlog,\n)\n") == [(1, "calibft.runlog")]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_imports_nothing_and_its_new_one_is_a_module(old, new):
    assert importlib.util.find_spec(f"calibft.{old}") is None
    assert importlib.util.find_spec(f"calibft.{new}") is not None
