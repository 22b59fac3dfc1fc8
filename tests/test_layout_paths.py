"""One source for the results layout: `calibft.pipeline.layout` alone spells a path under results/.

The rules name their inputs and outputs with the methods of `LAYOUT.pattern()` (rules/common.smk: `PATTERNS`), the
modules with those of a config's `Layout`. A string literal spells a results path when it starts with `results/`
or with a folder of the layout and a slash, at its start or right after an f-string's field (f"{root}/eval/").
Prose does not count (comments and docstrings), nor do the rules' `log:` and `benchmark:` sections: logs are not
results.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from calibft.artifacts.registry import ARTIFACTS
from tests.test_targets import PAPER, TWO_SEEDS
from tests.workflow.runner import REPO

LAYOUT_MODULE = REPO / "calibft" / "pipeline" / "layout.py"
# The folders of results/: the data layer, the models and tokenizers the workflow builds, the runs of each seed
# (adapters, evaluations, their checkpoints) and what every seed shares (tables, figures, the report).
FOLDERS = (
    "results",
    "prompts",
    "output_spaces",
    "tries",
    "granularity",
    "models",
    "tokenizers",
    "irt",
    "seeds",
    "adapters",
    "checkpoints",
    "eval",
    "tables",
    "figures",
    "reproduction",
    "protocols",
)
# the path up to an f-string's next field, if any
SPELLS_A_PATH = re.compile(rf"(?:^|\}})(/?(?:{'|'.join(FOLDERS)})/[^{{]*)")
LOG_SECTIONS = {"log", "benchmark"}
# The paths spelled outside the layout that the check lets pass (file, path up to an f-string's field), each with
# its reason.
ELSEWHERE = {
    # a glob of the evaluations' timings under the benchmarks folder of the logs
    ("calibft/artifacts/compute.py", "eval/*/"),
    # a glob of the metrics beside a tables folder that `calibft reference --record` is given
    ("calibft/artifacts/reproduction.py", "eval/*/*/*/**/metrics.json"),
    ("calibft/artifacts/reproduction.py", "seeds/*/eval/*/*/*/**/metrics.json"),
}


def checked_files() -> list[Path]:
    """The workflow's rules and every module of the package and of the rules' scripts, the layout's aside."""
    files = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    files += sorted((REPO / "calibft").rglob("*.py")) + sorted((REPO / "workflow_scripts").glob("*.py"))
    return [path for path in files if path != LAYOUT_MODULE]


def literal_text(token: tokenize.TokenInfo) -> str:
    """A string token's text between its quotes (an f-string's fields kept as written)."""
    if token.type != tokenize.STRING:  # a part of an f-string between its fields (Python 3.12 and later)
        return token.string
    return re.fullmatch(r"[a-zA-Z]*(\"\"\"|'''|\"|')(.*)\1", token.string, re.DOTALL).group(2)


def code_literals(source: str) -> Iterator[tokenize.TokenInfo]:
    """The string literals of Python or Snakemake source that are neither docstrings (a string alone on the line
    after a `def` or `class` header, or first in the file) nor in a rule's `log:` or `benchmark:` section."""
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    skipped = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    previous_header, line, section = None, [], None  # previous_header: None at the start of the file
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skipped:
            continue
        if token.type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
            line.append(token)
            continue
        # a logical line ends: its first name (`def`, a section's keyword), its section, its string literals
        starts = line[0] if line else None
        if starts is not None and starts.type == tokenize.NAME and len(line) > 1 and line[1].string == ":":
            section = starts.string
        elif starts is not None and starts.start[1] == 0:
            section = None
        header = starts.string if starts is not None and starts.type == tokenize.NAME else ""
        docstring = len(line) == 1 and starts.type == tokenize.STRING and previous_header in ("def", "class", None)
        if section not in LOG_SECTIONS and not docstring:
            yield from (t for t in line if t.type in strings)
        previous_header, line = header, []


def spelled_paths(source: str) -> Iterator[tuple[tokenize.TokenInfo, str]]:
    """(literal, the results path it spells) of each literal of `source` that spells one (`code_literals`)."""
    for token in code_literals(source):
        found = SPELLS_A_PATH.search(literal_text(token))
        if found:
            yield token, found.group(1)


def results_paths(path: Path) -> list[str]:
    """'file:line: literal' of each literal of `path` that spells a results path, the known ones aside."""
    name = path.relative_to(REPO).as_posix()
    return [
        f"{name}:{token.start[0]}: {token.string}"
        for token, spelled in spelled_paths(path.read_text())
        if (name, spelled) not in ELSEWHERE
    ]


def test_only_the_layout_spells_a_results_path():
    spelled = [found for path in checked_files() for found in results_paths(path)]
    assert spelled == [], "build these paths with calibft.pipeline.layout.Layout:\n" + "\n".join(spelled)


def test_the_known_literals_elsewhere_are_still_there():
    """Each exception of ELSEWHERE names a literal of its file: one that is gone leaves the list."""
    for name, spelled in ELSEWHERE:
        assert spelled in [path for _, path in spelled_paths((REPO / name).read_text())], (name, spelled)


@pytest.mark.parametrize(
    ("source", "spelled"),
    [
        ('OUT = "results/prompts/x.jsonl"\n', True),
        ('folder = f"{root}/adapters/{model}"\n', True),
        ('rule x:\n    output:\n        run_out("eval/{model}/mcq/metrics.json"),\n', True),
        ('rule x:\n    benchmark:\n        "results/x.tsv"\n    output:\n        "tables/{a}.tex",\n', True),
        ('rule x:\n    log:\n        run_log("eval/{model}/mcq.log"),\n', False),
        ('def f():\n    """Under results/tables/."""\n    return 1\n', False),
        ("x = 1  # results/eval/\n", False),
        ('LOG = "logs/eval/x.log"\nHUB = "resources/hf/models/qwen"\n', False),
    ],
)
def test_what_counts_as_spelling_a_results_path(source, spelled):
    found = list(spelled_paths(source))
    assert bool(found) == spelled, found


def test_rule_patterns_hold_the_seed_wildcard_with_several_seeds():
    """The rules' layout (`Layout.pattern`): the `{seed}` wildcard where a seed's runs go with several seeds,
    no seed folder with one, and no seed of its own for a job."""
    pattern = TWO_SEEDS.pattern()
    assert (
        pattern.eval_file("{model}", "{cond}", "mcq", "metrics.json")
        == "results/seeds/{seed}/eval/{model}/{cond}/mcq/metrics.json"
    )
    assert (
        pattern.adapter_file("{model}", "{recipe}", "run.json")
        == "results/seeds/{seed}/adapters/{model}/{recipe}/run.json"
    )
    assert pattern.prompts("{split}") == "results/prompts/{split}.jsonl"
    assert pattern.artifact_stem("table", "{artifact}") == "results/tables/{artifact}"
    assert pattern.seeded(12).eval_folder("m", "soft", "mcq") == "results/seeds/12/eval/m/soft/mcq"
    with pytest.raises(ValueError, match="several seeds"):
        _ = pattern.run_seed
    one = PAPER.pattern()
    assert one.seed_folder == "" and one.adapter_folder("{model}", "{recipe}") == "results/adapters/{model}/{recipe}"


def test_the_layout_puts_each_artifact_where_the_registry_names_it():
    """`Artifact.files` names a table's or figure's files under the results' root; the layout builds them."""
    assert [path for row in ARTIFACTS for path in PAPER.artifact_files(row)] == [
        f"results/{path}" for row in ARTIFACTS for path in row.files()
    ]
