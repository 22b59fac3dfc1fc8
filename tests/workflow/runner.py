"""Snakemake as the workflow tests run it: in a subprocess, in the checkout or in a scratch folder."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# Dry runs plan with --forceall: a demo already run in the checkout would otherwise leave fewer jobs to plan.
def snakemake(
    *args: str, cwd: Path = REPO, env: dict | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", *args]
    environment = None if env is None else {**os.environ, **env}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment)


def paper_workflow_in(workdir: Path) -> list[str]:
    """Arguments that run the paper's workflow and configuration in `workdir` (--configfile stays last: it
    takes every value that follows)."""
    return [
        "--directory",
        str(workdir),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--configfile",
        str(REPO / "config.yaml"),
    ]


def job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def code_blocks(language: str, *documents: str) -> list[str]:
    """The code blocks in this language of these documents (paths from the repository's root), in order."""
    return [
        block
        for document in documents
        for block in re.findall(rf"```{language}\n(.*?)```", (REPO / document).read_text(), re.DOTALL)
    ]
