"""`calibft preflight` as a cluster user runs it where Snakemake runs: against the real Slurm that `make test-all`
starts (tests/workflow/slurm_cluster.py) and a fake Hugging Face Hub on this machine (tests/fake_hub.py). A good
setup passes; each planted site problem (a partition whose time limit is shorter than training's runtime, a GPU
type the cluster lacks, an account Slurm refuses) and a gated repository without a token WILL FAIL with a fix."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from calibft.evals.tinybench.tasks import TINYBENCH_TASKS
from calibft.pipeline.config import hub_checkpoints, read_config
from tests.fake_hub import ACCESS_TOKEN, hub_env, serve
from tests.workflow.conftest import DEMO_CONFIG, ON_GPUS, require_cluster
from tests.workflow.runner import REPO

pytestmark = pytest.mark.workflow

SLURM_PROFILE = REPO / "profiles" / "slurm"


def preflight(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`calibft preflight ARGS` where Snakemake runs (the checkout), as a subprocess."""
    command = [sys.executable, "-m", "calibft.cli", "preflight", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)


def findings(output: str) -> list[tuple[str, str, str]]:
    """(status, subject, detail) of every check line, a `fix:` line joined to the detail of its check."""
    found = []
    for line in output.splitlines():
        if match := re.match(r"^(OK|WARNING|WILL FAIL)\s+(.+?): (.*)$", line):
            found.append(match.groups())
        elif line.strip().startswith("fix: ") and found:
            status, subject, detail = found[-1]
            found[-1] = (status, subject, f"{detail} || {line.strip()}")
    return found


def profile_with(folder: Path, **settings) -> Path:
    """A copy of profiles/slurm with `settings` over its own (default-resources and set-resources merged)."""
    config = yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())
    for key, value in settings.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


@pytest.fixture(scope="module")
def short_partition():
    """A partition on the GPU node whose time limit (10 min) is shorter than the demo's training runtime (30)."""
    require_cluster()
    subprocess.run(["scontrol", "create", "PartitionName=short", "Nodes=main", "MaxTime=10", "State=UP"], check=True)
    yield "short"
    subprocess.run(["scontrol", "delete", "PartitionName=short"], check=True)


def test_a_good_setup_passes_every_check(short_partition):
    result = preflight("--profile", str(SLURM_PROFILE), "--configfile", DEMO_CONFIG, ON_GPUS)
    assert result.returncode == 0, result.stdout + result.stderr
    found = findings(result.stdout)
    statuses = {subject: status for status, subject, _ in found}
    assert statuses["slurm sacct"] == "OK" and statuses["slurm partition gpu"] == "OK"
    assert statuses["slurm rule train (5 jobs) in partition gpu"] == "OK"
    assert any(subject.startswith("configuration") and status == "OK" for status, subject, _ in found)
    assert any(subject.startswith("plan") and status == "OK" for status, subject, _ in found)
    assert "WILL FAIL" not in result.stdout and result.stdout.rstrip().endswith("0 will fail, 1 with a warning")


def test_each_planted_site_problem_will_fail_with_its_fix(short_partition, tmp_path):
    profile = profile_with(
        tmp_path / "profile",
        **{
            "default-resources": {"slurm_account": "someone_else"},
            "set-resources": {"train": {"slurm_partition": short_partition}, "structured_eval": {"gpu_model": "h100"}},
        },
    )
    overlay = tmp_path / "structured_on_gpus.yaml"
    overlay.write_text(yaml.safe_dump({"models": {"tiny": {"eval_resources": {"gpus": 1, "gpu_model": "a100"}}}}))
    result = preflight("--profile", str(profile), "--configfile", DEMO_CONFIG, ON_GPUS, str(overlay))
    assert result.returncode == 1, result.stdout + result.stderr
    failing = [(subject, detail) for status, subject, detail in findings(result.stdout) if status == "WILL FAIL"]
    messages = "\n".join(f"{subject}: {detail}" for subject, detail in failing)

    def failed(subject: str, *parts: str) -> bool:
        return any(s.startswith(subject) and all(p in d for p in parts) for s, d in failing)

    assert failed("slurm rule train", "up to 30 min", "time limit is 10 min", "fix: use a partition"), messages
    assert failed("slurm rule structured_eval", "no node has 1 GPU(s) of type h100", "fix: "), messages
    assert failed("slurm partition gpu", "refuses jobs of account someone_else", "fix: set slurm_account"), messages
    assert all("|| fix: " in detail for _, detail in failing)


GATED_OWNERS = ("google/", "meta-llama/")
# every repository's listing on the fake Hub: what a load reads, and a copy in another format that it never takes
LISTING = {"config.json": 1_000, "tokenizer.json": 2_000, "model.safetensors": 3_000_000, "original/a.pth": 9_000_000}


def paper_hub() -> dict:
    """The fake Hub's repositories: every checkpoint, evaluator and dataset of the paper's plan (Gemma-3, Llama-3.2
    and PALOMA gated)."""
    config = read_config(REPO / "config.yaml")
    evaluators = config["evaluation"]["noveltybench"]["evaluators"].values()
    repos = {repo: {"gated": repo.startswith(GATED_OWNERS), "files": LISTING} for repo in hub_checkpoints(config)}
    repos |= {entry["hf_id"]: {"gated": False, "files": LISTING} for entry in evaluators}
    for task in TINYBENCH_TASKS.values():
        repos[f"datasets/{task.dataset}"] = {"gated": False, "files": {f"{task.config}/{task.split}.parquet": 50_000}}
    slices = {f"{name}/test/data.json.gz": 70_000 for name in config["evaluation"]["paloma"]["slices"]}
    repos["datasets/allenai/paloma"] = {"gated": True, "files": slices}
    return repos


@pytest.mark.parametrize("token", [None, ACCESS_TOKEN])
def test_the_papers_plan_gets_every_check_and_gated_repositories_need_a_token(token, tmp_path):
    """make preflight as a cluster user runs it for the paper's plan, on the test cluster (its nodes are smaller
    than the paper's jobs ask for: the memory of training WILL FAIL) and a fake Hub of the plan's repositories."""
    require_cluster()
    with serve(paper_hub()) as hub:
        result = preflight("--profile", str(SLURM_PROFILE), "all", env=hub_env(hub.url, tmp_path / "hf", token))
    assert result.returncode == 1, result.stdout + result.stderr
    found = findings(result.stdout)
    kinds = {subject.split()[0] for _, subject, _ in found}
    assert kinds == {"configuration", "plan", "hub", "disk", "slurm", "memory"}, kinds
    status = {subject: (state, detail) for state, subject, detail in found}
    assert status["plan snakemake -n all"][0] == "OK" and "709 jobs" in status["plan snakemake -n all"][1]
    assert status["slurm sacct"][0] == "OK" and status["slurm partition gpu"][0] == "OK"
    assert status["slurm rule train (58 jobs) in partition gpu"][0] == "WILL FAIL"
    gated = ["hub google/gemma-3-27b-it", "hub meta-llama/Llama-3.2-1B-Instruct", "hub dataset allenai/paloma"]
    gated_lines = [(subject, *status[subject]) for subject in status if subject.startswith(tuple(gated))]
    assert len(gated_lines) >= 3, sorted(status)
    if token is None:
        assert all(state == "WILL FAIL" and "https://huggingface.co/" in detail for _, state, detail in gated_lines)
    else:
        assert all(state == "OK" for _, state, _ in gated_lines), gated_lines
    qwen_state, qwen = status["hub Qwen/Qwen3-0.6B"]
    assert qwen_state == "OK" and "3 files" in qwen, qwen  # config, tokenizer and weights: not original/model.pth
    assert status[next(s for s in status if s.startswith("disk"))][0] == "OK"
    assert ACCESS_TOKEN not in result.stdout + result.stderr
