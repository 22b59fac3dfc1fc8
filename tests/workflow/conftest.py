"""The demo's run, shared by the tests of its results (test_demo.py) and of the SLURM profile (test_slurm.py): on
the test cluster of `make test-all` where one is up (tests/workflow/slurm_cluster.py), on this machine otherwise.
One xdist worker takes both modules (tests/conftest.py), so that the run is made once."""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workflow import slurm_cluster
from tests.workflow.runner import REPO, snakemake

DEMO_CONFIG = str(REPO / "profiles" / "demo" / "demo.yaml")
ON_GPUS = str(REPO / "tests" / "workflow" / "demo_on_gpus.yaml")  # each training run asks Slurm for a GPU
# The SLURM profile as a cluster user runs it
SLURM = (
    "--profile", str(REPO / "profiles" / "slurm"),
    "--verbose",  # the log shows every sbatch call
    "--slurm-init-seconds-before-status-checks", "2",  # the plugin's first status check (40 s by default)
)  # fmt: skip


@dataclass(frozen=True)
class DemoRun:
    workdir: Path
    output: str  # Snakemake's standard output and error
    cluster: Path | None  # the test cluster's folder, where the run went through profiles/slurm
    configfiles: tuple[str, ...]  # the run's configuration


def cluster_folder() -> Path | None:
    """The folder of the test cluster that `make test-all` started; None without one. CI (CALIBFT_REQUIRE_SLURM=1)
    has one, so a test that needs it fails there rather than skipping."""
    folder = os.environ.get(slurm_cluster.ENV)
    return Path(folder) if folder else None


def require_cluster() -> Path:
    folder = cluster_folder()
    if folder is None:
        message = "no test cluster: make test-all starts one where Debian's Slurm is installed, as root"
        if os.environ.get("CALIBFT_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> DemoRun:
    """The demo for real, in a scratch folder: `snakemake --profile profiles/demo` as a newcomer runs it, or, on the
    test cluster, through profiles/slurm (about 20 minutes on 2 cores, 8 locally)."""
    workdir, cluster = tmp_path_factory.mktemp("demo"), cluster_folder()
    where = ["--directory", str(workdir), "--snakefile", str(REPO / "Snakefile")]
    profile = SLURM if cluster else ("--profile", str(REPO / "profiles" / "demo"))
    configfiles = (DEMO_CONFIG, ON_GPUS) if cluster else (DEMO_CONFIG,)
    result = snakemake(*where, *profile, "--configfile", *configfiles, timeout=3600)  # --configfile takes the rest
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return DemoRun(workdir, result.stdout + result.stderr, cluster, configfiles)
