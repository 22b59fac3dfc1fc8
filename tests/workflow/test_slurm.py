"""The SLURM profile against a real Slurm (the one-node test cluster of tests/workflow/slurm_cluster.py, started by
`make test-all`): the demo goes through sbatch job by job, the training jobs get their GPUs, and a training job
that the cluster interrupts (requeue, preemption that requeues or cancels, scancel, its time limit) ends neither in
a hang nor in lost work: it resumes from its checkpoint to the adapter of an uninterrupted run."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from calibft.core.io import read_jsonl
from calibft.core.time_limit import RECHECK_S
from calibft.pipeline.plan import local_rules
from tests.workflow.conftest import SLURM, DemoRun, require_cluster
from tests.workflow.runner import REPO

pytestmark = pytest.mark.workflow

ADAPTER = Path("results/adapters/tiny/soft")
CHECKPOINTS = Path("results/checkpoints/tiny/soft")


@pytest.fixture(scope="module")
def slurm_demo(demo_run):
    require_cluster()
    assert demo_run.cluster is not None
    return demo_run


def sacct(fields: list[str], *selection: str) -> list[dict[str, str]]:
    """sacct's records of the jobs (not their steps) of `selection` (e.g. --name=the run's id), by field name
    (a field may give its width: Comment%100)."""
    # sacct selects jobs by name from midnight on unless told a start time: a run may cross midnight
    command = ["sacct", "-X", "--parsable2", "--noheader", "--starttime=2000-01-01", f"--format={','.join(fields)}"]
    command += selection
    lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
    names = [field.split("%")[0] for field in fields]
    return [dict(zip(names, line.split("|"), strict=True)) for line in lines]


def sbatch_calls(output: str) -> list[str]:
    return re.findall(r"^sbatch call: (.*)$", output, re.MULTILINE)


def submitted(output: str) -> list[tuple[str, str]]:
    """(Snakemake's job id, Slurm's job id) of every submission with sbatch, in order."""
    return re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", output)


def test_every_job_of_the_demo_but_the_local_rules_went_through_sbatch_and_completed(slurm_demo):
    output = slurm_demo.output
    jobs = dict(submitted(output))
    assert len(jobs) == len(submitted(output))  # no job was submitted twice
    finished = dict(re.findall(r"Finished jobid: (\d+) \(Rule: (\w+)\)", output))
    local = {rule for job, rule in finished.items() if job not in jobs}
    assert local <= local_rules(), local - local_rules()
    assert {rule for job, rule in finished.items() if job in jobs} & local_rules() == set()
    assert len(jobs) >= 60 and set(jobs) <= set(finished)

    (run_id,) = set(re.findall(r"--job-name (\S+)", "\n".join(sbatch_calls(output))))
    records = sacct(["JobIDRaw", "State"], f"--name={run_id}")
    assert sorted(r["JobIDRaw"] for r in records) == sorted(jobs.values())
    assert {r["State"] for r in records} == {"COMPLETED"}


def test_the_training_jobs_asked_slurm_for_their_gpus_and_got_them(slurm_demo):
    calls = sbatch_calls(slurm_demo.output)
    training = [call for call in calls if "--comment rule_train_" in call]
    assert len(training) == 5  # soft, hard and three ablation recipes of the demo
    assert all(" --gpus=a100:1" in call for call in training), training
    assert not any("--gpus" in call for call in calls if call not in training)

    (run_id,) = set(re.findall(r"--job-name (\S+)", "\n".join(calls)))
    allocated = {r["Comment"]: r["AllocTRES"] for r in sacct(["Comment%100", "AllocTRES%100"], f"--name={run_id}")}
    trained = {comment: tres for comment, tres in allocated.items() if comment.startswith("rule_train_")}
    assert len(trained) == 5 and all("gres/gpu:a100=1" in tres for tres in trained.values()), trained
    assert not any("gres/gpu" in tres for comment, tres in allocated.items() if comment not in trained)


# ---------------------------------------------------------------------------------------------------------------
# Interrupted training: the demo's soft adapter trained again through profiles/slurm in copies of the demo's folder,
# for two epochs instead of three (498 steps, not 747: `SHORTER`), all at once, each interrupted by the cluster after
# its first checkpoint (step 50), and each compared with the run that nothing interrupts (`REFERENCE`).
#
# The tiny model trains an epoch in seconds on an idle machine, so a test that only watched the checkpoints could
# interrupt too late. The test therefore freezes each interrupted run's training (the cgroup freezer of its job's
# steps, which the test cluster's proctrack/cgroup keeps) whenever it reads the run's checkpoint, lets it train
# `SLICE_S` between two reads, and interrupts it frozen. Slurm thaws the steps of a job as it ends it, and the
# training goes on until the SIGKILL, the cluster's KillWait (1 s) after: an interrupted run trains a few seconds
# at most past step 50, however loaded the machine is. (`scontrol suspend` takes seconds, and Slurm holds a job
# requeued while suspended.)


@dataclass
class Run:
    workdir: Path
    process: subprocess.Popen
    output_file: Path
    command: list[str]

    @property
    def output(self) -> str:
        return self.output_file.read_text(errors="replace")

    @property
    def log(self) -> str:
        return (self.workdir / "logs/train/tiny/soft.log").read_text(errors="replace")

    def slurm_jobs(self) -> list[str]:
        """The Slurm ids of the training job's submissions, in order."""
        return [slurm_job for _, slurm_job in submitted(self.output)]

    def checkpointed(self, step: int) -> bool:
        progress = self.workdir / CHECKPOINTS / "progress.json"
        return progress.exists() and json.loads(progress.read_text())["step"] >= step

    def attempts(self) -> list[dict]:
        return json.loads((self.workdir / ADAPTER / "run.json").read_text())["attempts"]


# every run's configuration over the demo's: the soft recipe for two epochs. After step 50 an interrupted run has
# 448 steps left, several seconds even on a fast CPU: more than Slurm takes to kill it (with one epoch, a run on an
# Intel Xeon trained its remaining 199 steps to the end before the requeue's kill reached it)
SHORTER = {"recipes": {"soft": {"epochs": 2}}}
REFERENCE = "gres_and_constraint"  # the run that nothing interrupts


def train_again(demo: DemoRun, workdir: Path, args: tuple[str, ...], config: dict | None) -> Run:
    """Snakemake training the demo's soft adapter again through profiles/slurm, in a folder holding the demo's data
    layer and models (hard links: the training job only reads them), with more arguments and configuration (over
    `SHORTER`)."""
    for part in ("results", "resources"):
        if (demo.workdir / part).exists():
            shutil.copytree(demo.workdir / part, workdir / part, copy_function=os.link)
    for fresh in (ADAPTER, CHECKPOINTS):
        shutil.rmtree(workdir / fresh, ignore_errors=True)
    overlay = workdir / "interruption.yaml"
    overlay.write_text(yaml.safe_dump(SHORTER))
    configfiles = [*demo.configfiles, str(overlay)]
    if config:
        (workdir / "case.yaml").write_text(yaml.safe_dump(config))
        configfiles.append(str(workdir / "case.yaml"))
    where = ["--directory", str(workdir), "--snakefile", str(REPO / "Snakefile")]
    command = [sys.executable, "-m", "snakemake", str(ADAPTER / "run.json"), *where, *args, *SLURM]
    command += ["--configfile", *configfiles]  # --configfile takes every value that follows: last
    return start(workdir, command, "snakemake.out")


def start(workdir: Path, command: list[str], output_name: str) -> Run:
    output_file = workdir / output_name
    with open(output_file, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return Run(workdir, process, output_file, command)


SLICE_S = 1.0  # how long an interrupted run trains between two reads of its checkpoint
FREEZER = Path("/sys/fs/cgroup/freezer")


def set_frozen(job: str, frozen: bool) -> None:
    """Freeze or thaw the processes of a Slurm job's steps (srun's: Snakemake's job and the training, not the
    batch script and not Slurm's step daemons); a job without a running step is left as it is."""
    state = "FROZEN" if frozen else "THAWED"
    for step in FREEZER.glob(f"slurm_*/uid_*/job_{job}/step_[0-9]*"):
        try:
            (step / "freezer.state").write_text(state)
            settled = time.monotonic() + 5
            while (step / "freezer.state").read_text().strip() != state and time.monotonic() < settled:
                time.sleep(0.01)
        except OSError:
            pass  # the step ended meanwhile


def shorten_time_limit(job: str) -> None:
    """Leave the job 3 minutes: less than the 10 of `training.stop_before_time_limit`, more than a checkpoint."""
    elapsed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%M"], capture_output=True, text=True).stdout.strip()
    minutes = sum(int(part) * 60**i for i, part in enumerate(reversed(elapsed.split(":")))) // 60
    subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={minutes + 3}"], check=True)


@dataclass(frozen=True)
class Interruption:
    args: tuple[str, ...] = ()  # Snakemake's, before the demo's
    config: dict | None = None  # over the demo's configuration
    interrupt: Callable[[str], object] | None = None  # done to the frozen Slurm job once step 50 is checkpointed
    # how long the job stays frozen after `interrupt` at most (Slurm thaws a job it ends)
    frozen_s: float = 60.0
    preempted: bool = False  # preempted by a job of partition `urgent`, on the preemptible node


INTERRUPTIONS = {
    "requeue": Interruption(interrupt=lambda job: subprocess.run(["scontrol", "requeue", job], check=True)),
    "scancel": Interruption(interrupt=lambda job: subprocess.run(["scancel", job], check=True)),
    # frozen past the training's next look at its time limit (every RECHECK_S), which then sees it
    "time_limit": Interruption(interrupt=shorten_time_limit, frozen_s=RECHECK_S + 1),
    "preempted_requeue": Interruption(args=("--set-resources", "train:slurm_partition=requeue"), preempted=True),
    "preempted_cancel": Interruption(args=("--set-resources", "train:slurm_partition=cancel"), preempted=True),
    # not interrupted: a site that wants GRES and a node feature instead of --gpus (profiles/slurm/config.yaml)
    "gres_and_constraint": Interruption(
        args=("--set-resources", "train:gres=gpu:a100:1", "train:gpu=0", "train:gpu_model=", "train:constraint=a100")
    ),
    # four processes asked for, and no CUDA behind the GPUs: no process group forms
    "four_gpus_without_cuda": Interruption(
        args=("--retries", "0"),
        config={"models": {"tiny": {"resources": {"gpus": 4, "gpu_model": "a100", "mem_mb": 4000, "runtime": 30}}}},
    ),
}


@pytest.fixture(scope="module")
def interrupted(slurm_demo, tmp_path_factory) -> dict[str, tuple[Run, int]]:
    """{interruption: (its run, Snakemake's exit status)}: every run started at once, each interrupted once it has
    checkpointed step 50, the two preempted ones by one job that needs the GPUs of both (the first to reach step
    50 waits frozen for the other)."""
    runs = {
        name: train_again(slurm_demo, tmp_path_factory.mktemp(name), case.args, case.config)
        for name, case in INTERRUPTIONS.items()
    }
    waiting = {name for name, case in INTERRUPTIONS.items() if case.interrupt}
    preempted = {name for name, case in INTERRUPTIONS.items() if case.preempted}
    thaw: dict[str, float] = {}  # interrupted jobs, frozen: when the test thaws each
    deadline = time.monotonic() + 1200
    while waiting or preempted or thaw:
        jobs = {name: runs[name].slurm_jobs()[-1] for name in waiting | preempted if runs[name].slurm_jobs()}
        for job in jobs.values():
            set_frozen(job, True)
        for name in sorted(waiting & jobs.keys()):
            if runs[name].checkpointed(50):
                INTERRUPTIONS[name].interrupt(jobs[name])
                thaw[jobs[name]] = time.monotonic() + INTERRUPTIONS[name].frozen_s
                waiting.remove(name)
        ready = {name for name in preempted & jobs.keys() if runs[name].checkpointed(50)}
        if preempted and ready == preempted:
            urgent = ["sbatch", "--partition=urgent", "--gpus=a100:4", "--mem=100", "--output=/dev/null"]
            subprocess.run([*urgent, "--wrap=sleep 2"], check=True, capture_output=True)
            thaw |= {jobs[name]: time.monotonic() + INTERRUPTIONS[name].frozen_s for name in preempted}
            preempted = set()
        for name in (waiting | preempted) - ready:
            if name in jobs:
                set_frozen(jobs[name], False)
        for job in [job for job, when in thaw.items() if time.monotonic() >= when]:
            set_frozen(job, False)
            del thaw[job]
        ended = [name for name in waiting | preempted if runs[name].process.poll() is not None]
        if ended or time.monotonic() > deadline:
            pytest.fail(f"{ended or sorted(waiting | preempted)} ended or never reached step 50 uninterrupted")
        time.sleep(SLICE_S)
    statuses = {}
    for name, run in runs.items():
        try:
            statuses[name] = run.process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            run.process.kill()
            statuses[name] = None  # Snakemake still waited: a hang
    return {name: (run, statuses[name]) for name, run in runs.items()}


def assert_trained_as(run: Run, status: int | None, reference: Path) -> None:
    """The adapter and the losses of the uninterrupted run in `reference`, bit for bit."""
    assert status == 0, run.output[-3000:]
    weights = "adapter_model.safetensors"
    assert (run.workdir / ADAPTER / weights).read_bytes() == (reference / ADAPTER / weights).read_bytes()
    configs = [
        json.loads((folder / ADAPTER / "adapter_config.json").read_text()) for folder in (run.workdir, reference)
    ]
    for config in configs:  # PEFT writes the set of target modules in the process's hash order
        config["target_modules"] = sorted(config["target_modules"])
    assert configs[0] == configs[1]
    resumed, uninterrupted = (
        [(r["step"], r["loss"], r["lr"]) for r in read_jsonl(folder / ADAPTER / "train_log.jsonl")]
        for folder in (run.workdir, reference)
    )
    assert resumed == uninterrupted


def test_a_requeued_training_job_runs_again_and_resumes_to_the_same_adapter(interrupted, slurm_demo):
    run, status = interrupted["requeue"]
    assert_trained_as(run, status, interrupted[REFERENCE][0].workdir)
    (job,) = run.slurm_jobs()  # Slurm ran the same job again; Snakemake did not resubmit it
    assert [a["resumed_at_step"] >= 50 for a in run.attempts()] == [False, True]
    assert f"== attempt 1, Slurm job {job}, requeued" in run.log and "resuming at step" in run.log


@pytest.mark.parametrize(("name", "resubmitted"), [("preempted_requeue", False), ("preempted_cancel", True)])
def test_a_preempted_training_job_resumes_to_the_same_adapter(interrupted, slurm_demo, name, resubmitted):
    run, status = interrupted[name]
    assert_trained_as(run, status, interrupted[REFERENCE][0].workdir)
    assert sacct(["State"], f"--jobs={run.slurm_jobs()[0]}", "--duplicates")[0]["State"] == "PREEMPTED"
    assert [a["resumed_at_step"] >= 50 for a in run.attempts()] == [False, True]
    assert len(run.slurm_jobs()) == 1 + resubmitted
    assert ("was preempted and not requeued" in run.output) == resubmitted


def test_a_cancelled_training_job_is_resubmitted_and_resumes_to_the_same_adapter(interrupted, slurm_demo):
    run, status = interrupted["scancel"]
    assert_trained_as(run, status, interrupted[REFERENCE][0].workdir)
    first, _ = run.slurm_jobs()
    assert f"SLURM job {first} was cancelled (CANCELLED by 0)" in run.output
    assert [a["resumed_at_step"] >= 50 for a in run.attempts()] == [False, True]
    assert "== attempt 1," in run.log and "== attempt 2," in run.log


def test_a_training_job_near_its_time_limit_checkpoints_stops_and_resumes_to_the_same_adapter(interrupted, slurm_demo):
    run, status = interrupted["time_limit"]
    assert_trained_as(run, status, interrupted[REFERENCE][0].workdir)
    first, _ = run.slurm_jobs()
    assert sacct(["State"], f"--jobs={first}")[0]["State"] == "FAILED"  # it stopped itself: no TIMEOUT
    stopped = int(re.search(r"stopped after step (\d+) of 498", run.log)[1])
    assert [a["resumed_at_step"] for a in run.attempts()] == [0, stopped] and stopped >= 50


def test_a_site_may_ask_for_gres_and_a_node_feature_instead_of_gpus(interrupted, slurm_demo):
    """The reference run: one attempt, the two epochs' 498 steps, and the demo's training where they share a step: the
    same adapter configuration and the same first loss (the same weights on the same first batch)."""
    run, status = interrupted[REFERENCE]
    assert status == 0, run.output[-3000:]
    assert [a["resumed_at_step"] for a in run.attempts()] == [0]
    steps, demo_steps = (
        read_jsonl(folder / ADAPTER / "train_log.jsonl") for folder in (run.workdir, slurm_demo.workdir)
    )
    assert [r["step"] for r in steps] == list(range(1, 499)) and len(demo_steps) == 747
    assert steps[0]["loss"] == demo_steps[0]["loss"]
    configs = [json.loads((f / ADAPTER / "adapter_config.json").read_text()) for f in (run.workdir, slurm_demo.workdir)]
    assert {**configs[0], "target_modules": None} == {**configs[1], "target_modules": None}
    (call,) = sbatch_calls(run.output)
    assert " --gres=gpu:a100:1" in call and " -C a100" in call and "--gpus" not in call, call
    (job,) = run.slurm_jobs()
    assert "gres/gpu:a100=1" in sacct(["AllocTRES%100"], f"--jobs={job}")[0]["AllocTRES"]


def test_four_processes_without_a_process_group_stop_before_any_step(interrupted):
    run, status = interrupted["four_gpus_without_cuda"]
    assert status not in (0, None)
    (call,) = sbatch_calls(run.output)
    assert " --gpus=a100:4" in call and "--num_processes 4" in run.output
    assert "did not form one group" in run.log and "stopping before any step" in run.log
    assert not (run.workdir / CHECKPOINTS / "train_log.jsonl").exists()


def slurm_job_output(workdir: Path, job: str) -> str:
    """What a running Slurm job has written to its output file (the executor plugin's log of the job)."""
    return "".join(path.read_text(errors="replace") for path in workdir.glob(f".snakemake/slurm_logs/**/{job}.log"))


def test_a_restart_after_snakemake_was_killed_leaves_one_writer_and_the_same_adapter(interrupted, slurm_demo, tmp_path):
    """A cluster user's login session dies during training: the main Snakemake is SIGKILLed while its training job
    runs in Slurm (frozen once it has checkpointed step 50), unlocked and started again at once. The restart submits
    the training job again; that copy waits for the first (which is thawed only once the copy says it waits) and
    adopts its adapter: one writer, and the adapter of the uninterrupted run."""
    first_run = train_again(slurm_demo, tmp_path, (), None)
    deadline = time.monotonic() + 900
    while True:
        jobs = first_run.slurm_jobs()
        if jobs:
            set_frozen(jobs[-1], True)
            if first_run.checkpointed(50):
                break
            set_frozen(jobs[-1], False)
        assert first_run.process.poll() is None and time.monotonic() < deadline, first_run.output[-3000:]
        time.sleep(SLICE_S)
    (first,) = jobs
    first_run.process.kill()
    first_run.process.wait()
    subprocess.run([*first_run.command, "--unlock"], cwd=REPO, check=True, capture_output=True)
    restarted = start(tmp_path, first_run.command, "restarted.out")
    try:
        while not (jobs := restarted.slurm_jobs()) or "still runs this job" not in slurm_job_output(tmp_path, jobs[0]):
            assert restarted.process.poll() is None and time.monotonic() < deadline, restarted.output[-3000:]
            time.sleep(SLICE_S)
    finally:
        set_frozen(first, False)
    (second,) = jobs
    assert second != first
    status = restarted.process.wait(timeout=max(deadline - time.monotonic(), 1))
    assert_trained_as(restarted, status, interrupted[REFERENCE][0].workdir)
    assert [a["resumed_at_step"] for a in restarted.attempts()] == [0]  # one training, never resumed
    log = restarted.log
    assert f"== attempt 1, Slurm job {first}," in log and f"== attempt 1, Slurm job {second}," in log
    assert f"waited for Slurm job {first}, which ran this job from" in log and "(with exit status 0)" in log
    assert "they are adopted, nothing runs again" in log and "resuming at step" not in log
    assert {r["State"] for r in sacct(["State"], f"--jobs={first},{second}")} == {"COMPLETED"}
