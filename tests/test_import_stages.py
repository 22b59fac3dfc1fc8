"""calibft's stages import down the stack only, and workflow_scripts/ and the rules' commands name modules of
calibft."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "calibft"
# bottom to top; a module imports from its own stage and those below it
STAGES = {"core": 0, "data": 1, "lm": 2, "training": 3, "evals": 4, "demo": 5, "artifacts": 5, "pipeline": 6}
TOP = 7  # calibft/__init__.py, cli.py


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def rank(module: str) -> int:
    parts = module.split(".")
    return STAGES[parts[1]] if len(parts) > 2 or parts[-1] in STAGES else TOP


def imports(path: Path) -> set[str]:
    """The calibft modules that `path` imports anywhere (at the top or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        for name in names:
            while name.startswith("calibft") and name not in MODULES:
                name = name.rpartition(".")[0]  # a name imported from a module, not a module
            if name.startswith("calibft"):
                found.add(name)
    return found


GRAPH = {module: imports(path) - {module} for module, path in MODULES.items()}


def test_every_module_sits_in_a_stage():
    assert {module.split(".")[1] for module in MODULES if module.count(".") >= 2} <= set(STAGES)
    top = sorted(module for module in MODULES if rank(module) == TOP)
    assert top == ["calibft", "calibft.cli"], top


def test_imports_run_down_the_stack():
    upward = {
        (module, imported)
        for module, targets in GRAPH.items()
        for imported in targets
        if imported != "calibft" and rank(imported) > rank(module)
    }
    assert not upward, sorted(upward)


# Each job lives with what runs it, in a module of its own that the planner imports (calibft.pipeline.jobs builds
# the jobs from the config): the runners import torch, the jobs' modules may not. runner -> its job's module
RUNNERS = {
    "calibft.training.train": "calibft.training.job",
    **{
        f"calibft.evals.{name}.runner": f"calibft.evals.{name}.job"
        for name in ("structured", "exact", "open_ended", "mcq", "noveltybench", "paloma", "tinybench")
    },
}
JOBS = ("calibft.evals.job", *RUNNERS.values())  # and ModelJob, which every evaluation's job extends


def test_the_jobs_and_their_builders_import_no_deep_learning_library():
    code = "import sys\n" + "".join(f"import {name}\n" for name in (*JOBS, "calibft.pipeline.jobs"))
    code += "print(sorted({'torch', 'transformers', 'peft'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_each_runner_reads_its_job_from_below_the_pipeline():
    assert all(rank(name) < STAGES["pipeline"] for name in JOBS)
    for runner, job in RUNNERS.items():
        assert job in GRAPH[runner] and "calibft.pipeline.jobs" not in GRAPH[runner], runner


def test_no_import_cycle():
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            raise AssertionError(" -> ".join((*path[path.index(module) :], module)))
        if module in done:
            return
        for imported in GRAPH.get(module, ()):
            if imported != "calibft":
                visit(imported, (*path, module))
        done.add(module)

    for module in MODULES:
        visit(module, ())


def test_what_the_workflow_scripts_and_the_rules_commands_name_is_a_module():
    named = set()
    for script in (ROOT / "workflow_scripts").glob("*.py"):
        tree = ast.parse(script.read_text())
        named |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
        named |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    rules = "\n".join(path.read_text() for path in (ROOT / "rules").glob("*.smk"))
    # a rule's shell command runs `-m MODULE`, or `-m {params.runner}` with the module as that param
    commands = set(re.findall(r"(?:-m |runner=\")(calibft\.[\w.]+)", rules))
    assert {"calibft.core.runlog", "calibft.training.train", "calibft.evals.structured"} <= commands
    unknown = {name for name in named | commands if name.startswith("calibft")} - set(MODULES)
    assert not unknown, sorted(unknown)
