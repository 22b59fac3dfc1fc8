"""A Slurm cluster on localhost, for the tests of the SLURM profile: Debian's Slurm 22.05 daemons
(munged, MariaDB, slurmdbd, slurmctld, slurmd), each started in the foreground from a scratch folder and stopped
by its PID. Nothing outside the machine is contacted. Outside the folder, the cluster takes Slurm's default
configuration path, /etc/slurm/{slurm,gres,slurmdbd}.conf, as links into the folder (Snakemake's slurm-jobstep executor
clears SLURM_CONF in the jobs, so the configuration must be where a cluster keeps it); it refuses to start where
/etc/slurm/slurm.conf is another cluster's, and removes the links when it stops. Slurm's clients take munged's
default socket, so a munged of the machine serves if one runs, else one with a key of its own.

Each node has four GPUs of type a100, as the paper's nodes do: character devices of the NVIDIA major number, which
Slurm accepts as GPUs (it drops a count-only GPU GRES and drains the node). No CUDA device stands behind them, so
a job sees CUDA_VISIBLE_DEVICES but trains on the CPU.

Job accounting enforces associations, as a site does: the user has one account (`ACCOUNT`, its default), and Slurm
refuses jobs of any other.

Two nodes, each with four GPUs, and their partitions:
- `gpu` on node `main`, the default: its jobs are never preempted;
- `requeue` on node `preemptible`: a preempted job is requeued (PreemptMode=REQUEUE), as a site that preempts
  should do;
- `cancel` on node `preemptible`: a preempted job is cancelled (PreemptMode=CANCEL);
- `urgent` on node `preemptible`: a higher priority tier, whose jobs preempt those of `requeue` and `cancel`.

    python -m tests.workflow.slurm_cluster FOLDER                 # one, up until Ctrl-C
    python -m tests.workflow.slurm_cluster FOLDER -- COMMAND...   # one, up while COMMAND runs (make test-all)

Installing the daemons (Debian, as root): apt-get install slurm-wlm slurmdbd munge mariadb-server
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
ENV = "CALIBFT_TEST_SLURM"  # the folder of the running test cluster, for the tests
# the preemption tests go to the second node, where no other job runs
NODES = ("main", "preemptible")
GPUS = 4
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
SLURM_ETC = Path("/etc/slurm")
CONFIG_FILES = ("slurm.conf", "gres.conf", "slurmdbd.conf", "cgroup.conf")
ACCOUNT = "calibft"  # the Slurm account of the test cluster's user, which associations enforce
NVIDIA_MAJOR = 195  # the character-device major number of NVIDIA GPUs (/dev/nvidia0 is 195, 0)


def missing_programs() -> list[str]:
    """The daemons and commands of the cluster that this machine lacks."""
    needed = (*DAEMONS, "mariadb-install-db", "mariadb", "sacctmgr", "sbatch", "sacct", "scontrol")
    return [name for name in needed if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class SlurmCluster:
    folder: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *command: str, check: bool = True) -> str:
        """A Slurm command (sbatch, sacct, squeue, scontrol) against this cluster; its standard output."""
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def log(self, daemon: str) -> str:
        path = self.folder / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Cancel every job, then stop every daemon that was started, in reverse order, by its PID (SIGTERM, then
        SIGKILL after 20 s), and remove the configuration links."""
        if any(name.startswith("slurmd-") and p.poll() is None for name, p in self.processes.items()):
            self.run("scancel", "--user=root", check=False)
            deadline = time.monotonic() + 30
            while self.run("squeue", "-h", check=False).strip() and time.monotonic() < deadline:
                time.sleep(1)
        for name in reversed(list(self.processes)):
            process = self.processes.pop(name)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for name in CONFIG_FILES:
            link = SLURM_ETC / name
            if link.is_symlink() and Path(os.readlink(link)).is_relative_to(self.folder):
                link.unlink()

    def _start(self, name: str, command: list[str], ready, what: str, timeout: float = 60) -> None:
        output = open(self.folder / "log" / f"{name}.out", "w")
        self.processes[name] = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while not ready():
            if self.processes[name].poll() is not None or time.monotonic() > deadline:
                tail = (self.folder / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"{name} did not start ({what}); its output:\n{tail}\n{self.log(name)[-2000:]}")
            time.sleep(0.2)


def _succeeds(*command: str) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def start(folder: Path, cpus: int | None = None, mem_mb: int | None = None) -> SlurmCluster:
    """Start a cluster whose state, configuration and logs live in `folder` (emptied first).

    Each node declares `cpus` CPUs (default: this machine's, so that the jobs on a node share the cores as a
    local run's do) and `mem_mb` of memory (default: half this machine's), whatever the machine has
    (SlurmdParameters=config_overrides).
    """
    if os.geteuid() != 0:
        raise RuntimeError("the test cluster runs its daemons as root (SlurmUser=root, the GPU device nodes)")
    folder = Path(folder).resolve()
    for name in CONFIG_FILES:
        link = SLURM_ETC / name
        if link.exists() and not (link.is_symlink() and Path(os.readlink(link)).name == name):
            raise RuntimeError(f"{link} is another cluster's configuration: start the test cluster on another machine")
    shutil.rmtree(folder, ignore_errors=True)
    for sub in ("etc", "log", "run", "state", "db", "dev", *(f"spool/{node}" for node in NODES)):
        (folder / sub).mkdir(parents=True)
    folder.chmod(0o755)
    cpus = cpus or os.cpu_count()
    mem_mb = mem_mb or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**21
    cluster = SlurmCluster(folder)
    ports = {name: _free_port() for name in ("mysql", "slurmdbd", "slurmctld", *NODES)}
    munge_socket = MUNGE_SOCKET
    user = "root"

    for index in range(GPUS):
        os.mknod(folder / "dev" / f"nvidia{index}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, index))

    # munge: Slurm's clients only use the default socket, so a munged of this machine serves if one runs;
    # else one with a key of its own
    if not _succeeds("sh", "-c", "munge -n | unmunge"):
        key = folder / "etc" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        munge_socket.parent.mkdir(parents=True, exist_ok=True)
        munged = [
            _program("munged"), "--foreground", "--force", f"--socket={munge_socket}", f"--key-file={key}",
            f"--pid-file={folder / 'run' / 'munged.pid'}", f"--log-file={folder / 'log' / 'munged.log'}",
            f"--seed-file={folder / 'state' / 'munged.seed'}",
        ]  # fmt: skip
        cluster._start("munged", munged, lambda: _succeeds("sh", "-c", "munge -n | unmunge"), "munge -n fails")

    # MariaDB for slurmdbd (sacct), on a loopback port
    datadir, mysql_socket = folder / "db", folder / "run" / "mysql.sock"
    subprocess.run(
        [_program("mariadb-install-db"), f"--datadir={datadir}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    mariadbd = [
        _program("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--socket={mysql_socket}", "--user=root",
        "--bind-address=127.0.0.1", f"--port={ports['mysql']}", f"--pid-file={folder / 'run' / 'mariadb.pid'}",
        f"--log-error={folder / 'log' / 'mariadbd.log'}", "--innodb-buffer-pool-size=64M",
    ]  # fmt: skip
    mysql = [_program("mariadb"), "--no-defaults", f"--socket={mysql_socket}", "-uroot"]
    cluster._start("mariadbd", mariadbd, lambda: _succeeds(*mysql, "-e", "select 1"), "no connection")
    subprocess.run(
        [*mysql, "-e", "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; "
         "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; CREATE DATABASE slurm_acct_db;"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    # cred_expire: how long a requeued job waits before it may start again (default 120 s)
    auth = "AuthType=auth/munge\nAuthInfo=cred_expire=10\n"
    _write(
        folder / "etc" / "slurmdbd.conf",
        f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={ports['slurmdbd']}\nSlurmUser={user}\n"
        f"PidFile={folder / 'run' / 'slurmdbd.pid'}\nLogFile={folder / 'log' / 'slurmdbd.log'}\n"
        f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={ports['mysql']}\n"
        "StorageUser=slurm\nStoragePass=slurm\nStorageLoc=slurm_acct_db\n",
        mode=0o600,
    )
    nodes = "".join(
        f"NodeName={node} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 Port={ports[node]} CPUs={cpus} "
        f"RealMemory={mem_mb} Gres=gpu:a100:{GPUS} Feature=a100 State=UNKNOWN\n"
        for node in NODES
    )
    # KillWait: the seconds from SIGTERM to SIGKILL when Slurm ends a job. The SIGTERM reaches Snakemake's job
    # process, not the training under it, which trains on until the SIGKILL: a short wait keeps a test's
    # interrupted run (seconds an epoch) from training to its end after the interruption
    _write(
        folder / "etc" / "slurm.conf",
        f"""ClusterName=calibft
SlurmctldHost=localhost(127.0.0.1)
SlurmUser={user}
SlurmctldPort={ports["slurmctld"]}
{auth}StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}/%n
SlurmctldPidFile={folder / "run" / "slurmctld.pid"}
SlurmdPidFile={folder / "run"}/slurmd-%n.pid
SlurmctldLogFile={folder / "log" / "slurmctld.log"}
SlurmdLogFile={folder / "log"}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={ports["slurmdbd"]}
AccountingStorageTRES=gres/gpu,gres/gpu:a100
AccountingStorageEnforce=associations
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=1
MinJobAge=300
ReturnToService=2
AccountingStoreFlags=job_comment
GresTypes=gpu
{nodes}PartitionName=gpu Nodes=main Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=requeue Nodes=preemptible MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=cancel Nodes=preemptible MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=urgent Nodes=preemptible MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
""",
    )
    _write(
        folder / "etc" / "gres.conf",
        f"NodeName={','.join(NODES)} Name=gpu Type=a100 File={folder / 'dev'}/nvidia[0-{GPUS - 1}]\n",
    )
    # cgroups track every process of a job, so that a cancelled job leaves none behind (as on a real cluster)
    _write(folder / "etc" / "cgroup.conf", "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
    SLURM_ETC.mkdir(parents=True, exist_ok=True)
    for name in CONFIG_FILES:
        (SLURM_ETC / name).unlink(missing_ok=True)
        (SLURM_ETC / name).symlink_to(folder / "etc" / name)

    cluster._start(
        "slurmdbd", [_program("slurmdbd"), "-D"], lambda: _succeeds("sacctmgr", "-n", "list", "cluster"),
        "sacctmgr cannot reach it",
    )  # fmt: skip
    subprocess.run(["sacctmgr", "-i", "add", "cluster", "calibft"], capture_output=True, timeout=60)
    # associations are enforced, as on a site: the user's jobs run under the one account it has (its default)
    for add in (["account", ACCOUNT], ["user", user, f"account={ACCOUNT}", f"defaultaccount={ACCOUNT}"]):
        subprocess.run(["sacctmgr", "-i", "add", *add, "cluster=calibft"], check=True, capture_output=True, timeout=60)
    cluster._start("slurmctld", [_program("slurmctld"), "-D", "-i"], lambda: _succeeds("sinfo"),
                   "sinfo cannot reach it")  # fmt: skip
    for node in NODES:
        cluster._start(
            f"slurmd-{node}", [_program("slurmd"), "-D", "-N", node],
            lambda node=node: cluster.run("sinfo", "-h", "-n", node, "-o", "%t", check=False).strip() == "idle",
            "the node did not become idle", timeout=90,
        )  # fmt: skip
    return cluster


def main(argv: list[str] | None = None) -> int:
    """`FOLDER`: a cluster until Ctrl-C. `FOLDER -- COMMAND...`: a cluster while COMMAND runs, with
    CALIBFT_TEST_SLURM=FOLDER in its environment; COMMAND's exit status. Where the cluster cannot start (not
    root, Slurm not installed), COMMAND runs without one, unless CALIBFT_REQUIRE_SLURM=1 (CI)."""
    args = sys.argv[1:] if argv is None else argv
    folder, command = Path(args[0]), args[args.index("--") + 1 :] if "--" in args else []
    why_not = missing_programs() and f"Slurm's programs are missing: {', '.join(missing_programs())}"
    why_not = why_not or (os.geteuid() != 0 and "the test cluster runs as root")
    if why_not:
        if os.environ.get("CALIBFT_REQUIRE_SLURM") == "1" or not command:
            print(f"no test cluster: {why_not} (Debian: apt-get install {' '.join(PACKAGES)})", file=sys.stderr)
            return 2
        print(f"no test cluster ({why_not}): the tests that need one are skipped", file=sys.stderr)
        return subprocess.run(command).returncode
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster (finally) when terminated
    cluster = start(folder)
    try:
        if command:
            return subprocess.run(command, env={**os.environ, ENV: str(cluster.folder)}).returncode
        print("up (Ctrl-C stops it): sinfo, sbatch, sacct and snakemake --profile profiles/slurm use it", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
