"""No code runs from data: the package, the workflow and the benchmarks never evaluate text, unpickle freely, load
torch files with pickle, or let a Hugging Face repository run its own code.

Python files are read with `ast`, so that a method of the same name (`model.eval()`, `re.compile`) is not taken
for the builtin; the Snakefile and rules, which are not Python, are searched as text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
PYTHON_ROOTS = ("calibft", "workflow_scripts", "benchmarks")
WORKFLOW_FILES = ("Snakefile", "rules")

# Builtins that run text as code.
CODE_BUILTINS = {"eval", "exec", "compile"}
# Readers that build arbitrary objects from bytes (pickle and its relatives, YAML's full loaders).
UNSAFE_READERS = {
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "_pickle.load",
    "_pickle.loads",
    "_pickle.Unpickler",
    "cloudpickle.load",
    "cloudpickle.loads",
    "dill.load",
    "dill.loads",
    "joblib.load",
    "marshal.load",
    "marshal.loads",
    "shelve.open",
    "pandas.read_pickle",
    "pd.read_pickle",
    "yaml.load",
    "yaml.full_load",
    "yaml.unsafe_load",
}
# The one restricted unpickler (an allow-list of numpy types): calibft.evals.tinybench.gpirt.ParamsUnpickler.
RESTRICTED_UNPICKLER = Path("calibft/evals/tinybench/gpirt.py")


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)) is not None:
        return f"{base}.{node.attr}"
    return None


def _keyword_is(call: ast.Call, name: str, value: object) -> bool:
    """Whether the call passes `name=value` with a literal `value`."""
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def _call_findings(call: ast.Call) -> list[str]:
    """What is wrong with one call, if anything."""
    name = _dotted(call.func)
    found = []
    if isinstance(call.func, ast.Name) and call.func.id in CODE_BUILTINS:
        found.append(f"{call.func.id}() runs text as code")
    if name in UNSAFE_READERS:
        found.append(f"{name}() can build any object, running its code")
    if name == "torch.load" and not _keyword_is(call, "weights_only", True):
        found.append("torch.load() without weights_only=True unpickles freely")
    passed = {k.arg for k in call.keywords}
    if name in ("np.load", "numpy.load") and "allow_pickle" in passed and not _keyword_is(call, "allow_pickle", False):
        found.append(f"{name}() with allow_pickle unpickles object arrays")
    if "trust_remote_code" in passed and not _keyword_is(call, "trust_remote_code", False):
        found.append("trust_remote_code runs a repository's code")
    return found


def findings(source: str, path: Path) -> list[str]:
    """Every place in a Python file's source that would run code from data, as `path:line: what`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        problems = []
        if isinstance(node, ast.Call):
            problems = _call_findings(node)
        elif isinstance(node, ast.ImportFrom) and node.module in ("pickle", "_pickle", "marshal", "dill"):
            loaders = [a.name for a in node.names if a.name in ("load", "loads", "Unpickler", "*")]
            problems = [f"from {node.module} import {', '.join(loaders)}"] if loaders else []
        elif isinstance(node, ast.ClassDef) and path != RESTRICTED_UNPICKLER:
            bases = [_dotted(base) for base in node.bases]
            problems = ["an Unpickler outside the restricted one"] if "pickle.Unpickler" in bases else []
        found += [f"{path}:{node.lineno}: {problem}" for problem in problems]
    return found


# The same, as text, for the Snakefile and the rules (Python inside Snakemake's syntax).
WORKFLOW_PATTERNS = {
    "trust_remote_code": re.compile(r"trust_remote_code\s*=\s*(?!False\b)"),
    "eval/exec/compile": re.compile(r"(?<![\w.])(eval|exec|compile)\s*\("),
    "pickle": re.compile(r"\b(c?pickle|dill|marshal|joblib)\.(load|loads|Unpickler)\b|read_pickle|unsafe_load"),
    "torch.load": re.compile(r"torch\.load\((?![^)]*weights_only\s*=\s*True)"),
}


def workflow_findings(text: str, path: Path) -> list[str]:
    """Every line of a workflow file that matches one of `WORKFLOW_PATTERNS`."""
    return [
        f"{path}:{number}: {what}"
        for number, line in enumerate(text.splitlines(), start=1)
        for what, pattern in WORKFLOW_PATTERNS.items()
        if pattern.search(line)
    ]


def _python_files() -> list[Path]:
    return sorted(p for root in PYTHON_ROOTS for p in (REPOSITORY / root).rglob("*.py"))


def _workflow_files() -> list[Path]:
    files = [REPOSITORY / "Snakefile", *sorted((REPOSITORY / "rules").rglob("*.smk"))]
    return [p for p in files if p.is_file()]


def test_the_package_workflow_and_benchmarks_run_no_code_from_data():
    python, workflow = _python_files(), _workflow_files()
    assert len(python) > 50 and any(p.name == "gpirt.py" for p in python) and len(workflow) > 3
    found = [f for p in python for f in findings(p.read_text(encoding="utf-8"), p.relative_to(REPOSITORY))]
    found += [f for p in workflow for f in workflow_findings(p.read_text(encoding="utf-8"), p.relative_to(REPOSITORY))]
    assert found == []


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("eval(text)", "eval() runs text"),
        ("exec(compile(text, 'f', 'exec'))", "exec() runs text"),
        ("import pickle\npickle.load(f)", "pickle.load()"),
        ("import pickle\npickle.Unpickler(f).load()", "pickle.Unpickler()"),
        ("from pickle import loads", "from pickle import loads"),
        ("class U(pickle.Unpickler):\n    pass", "an Unpickler outside the restricted one"),
        ("torch.load(path)", "torch.load() without weights_only=True"),
        ("torch.load(path, weights_only=False)", "torch.load() without weights_only=True"),
        ("np.load(path, allow_pickle=True)", "np.load() with allow_pickle"),
        ("pd.read_pickle(path)", "pd.read_pickle()"),
        ("yaml.load(text, Loader=yaml.Loader)", "yaml.load()"),
        ("AutoModel.from_pretrained(repo, trust_remote_code=True)", "trust_remote_code"),
        ("AutoModel.from_pretrained(repo, trust_remote_code=flag)", "trust_remote_code"),
    ],
)
def test_the_scan_finds_each_way_to_run_code_from_data(source, what):
    assert any(what in finding for finding in findings(source, Path("calibft/x.py")))


@pytest.mark.parametrize(
    "source",
    [
        "model.eval()",
        "re.compile(pattern)",
        "torch.load(path, weights_only=True)",
        "np.load(path)",
        "yaml.safe_load(text)",
        "json.loads(text)",
        "AutoModel.from_pretrained(folder, trust_remote_code=False)",
        "ParamsUnpickler(handle).load()",
    ],
)
def test_the_scan_lets_safe_calls_pass(source):
    assert findings(source, Path("calibft/x.py")) == []


def test_the_restricted_unpickler_is_the_only_one():
    source = "import pickle\nclass ParamsUnpickler(pickle.Unpickler):\n    pass\n"
    assert findings(source, RESTRICTED_UNPICKLER) == []
    assert findings(source, Path("calibft/other.py")) != []


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("    shell: 'python -c \"eval(x)\"'", True),
        ("        params = torch.load(input.state)", True),
        ("        model = load(trust_remote_code=True)", True),
        ("        model.eval()", False),
        ("        torch.load(input.state, weights_only=True)", False),
    ],
)
def test_the_workflow_scan(line, found):
    assert bool(workflow_findings(line, Path("rules/x.smk"))) is found
