"""calibft preflight's pieces without a cluster: Slurm's time and GRES formats, the plan's requests against
partitions and nodes given as data, the downloads a plan makes, the configuration check. The real Slurm and the
fake Hub end to end: tests/workflow/test_preflight.py."""

import pytest
import yaml

from calibft.pipeline.plan import PlannedJob, local_rules, planned_jobs
from calibft.pipeline.preflight import configuration_check, downloads, workflow_config
from calibft.pipeline.preflight_checks import OK, WILL_FAIL, Check, exit_status
from calibft.pipeline.preflight_slurm import Node, Partition, gpu_counts, request_checks, requests, slurm_minutes
from tests.workflow.runner import REPO

PAPER_PLAN_EXCERPT = """
rule checkpoint_snapshot:
    output: resources/hf/models/Qwen/Qwen3-14B
    wildcards: hf_repo=Qwen/Qwen3-14B
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60

rule paloma_slice:
    output: resources/paloma/mc4.jsonl
    wildcards: paloma_slice=mc4
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60

rule tinybenchmarks_items:
    output: resources/tinybenchmarks/mmlu.jsonl
    wildcards: tb_task=mmlu
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60

rule evaluator_snapshot:
    output: resources/hf/reward_model
    wildcards: evaluator=reward_model
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60

rule train:
    wildcards: model=qwen3_14b, recipe=soft
    resources: tmpdir=/tmp, mem_mb=256000, runtime=360, gpu=4, gpu_model=a100, slurm_partition=gpu, attempt=1

rule train:
    wildcards: model=qwen3_0p6b, recipe=hard
    resources: tmpdir=/tmp, mem_mb=128000, runtime=480, gpu=4, gpu_model=a100, slurm_partition=gpu, attempt=1

rule structured_eval:
    wildcards: model=qwen3_14b, cond=base, split=ood
    resources: tmpdir=/tmp, mem_mb=64000, runtime=480, gres=gpu:h100:1, slurm_partition=gpu
"""


@pytest.mark.parametrize(
    ("limit", "minutes"),
    [("UNLIMITED", None), ("INFINITE", None), ("30", 30), ("10:30", 11), ("04:00:00", 240), ("1-12", 2160),
     ("2-00:00:01", 2881)],
)  # fmt: skip
def test_slurm_minutes(limit, minutes):
    assert slurm_minutes(limit) == minutes


def test_gpu_counts_of_node_and_request_gres():
    assert gpu_counts("gpu:a100:4(S:0-1),gpu:v100:2,tmpdisk:100") == {"a100": 4, "v100": 2}
    assert gpu_counts("gpu:2") == {"": 2} and gpu_counts("(null)") == {}


def test_the_plan_gives_one_request_per_rule_at_its_largest():
    jobs = planned_jobs(PAPER_PLAN_EXCERPT.splitlines())
    assert jobs[0].wildcards == {"hf_repo": "Qwen/Qwen3-14B"}
    found = requests(jobs, local_rules())
    assert [(r.rule, r.jobs, r.gpus, r.gpu_model, r.mem_mb, r.runtime) for r in found] == [
        ("train", 2, 4, "a100", 256000, 480),
        ("structured_eval", 1, 1, "h100", 64000, 480),
    ]  # the downloads are local rules: they never go to Slurm


NODES = {
    "a": Node("a", {"a100": 4}, 512000, frozenset({"a100"})),
    "b": Node("b", {"v100": 8}, 128000, frozenset()),
}


def _request(**changes):
    jobs = planned_jobs(PAPER_PLAN_EXCERPT.splitlines())
    (train, *_) = requests(jobs, set())[4:]
    return train if not changes else type(train)(**{**train.__dict__, **changes})


@pytest.mark.parametrize(
    ("partition", "changes", "finding"),
    [
        (Partition("gpu", ("a", "b"), None, True, True), {}, None),
        (Partition("gpu", ("a", "b"), 240, True, True), {}, "the partition's time limit is 240 min"),
        (Partition("gpu", ("b",), None, True, True), {}, "no node has 4 GPU(s) of type a100; its nodes have 8 x v100"),
        (Partition("gpu", ("a", "b"), None, True, True), {"mem_mb": 600000}, "the largest node that fits them has "
         "512000 MB"),
        (Partition("gpu", ("a", "b"), None, True, True), {"constraint": "h100"}, "with feature h100"),
        (Partition("gpu", ("a", "b"), None, True, True), {"gpu_model": "", "gpus": 8, "mem_mb": 1000}, None),  # b's 8
    ],
)  # fmt: skip
def test_a_request_against_its_partitions_nodes(partition, changes, finding):
    checks = request_checks(_request(**changes), partition, NODES)
    if finding is None:
        assert [c.status for c in checks] == [OK]
    else:
        assert [c.status for c in checks] == [WILL_FAIL] and finding in checks[0].detail and checks[0].fix


def test_the_downloads_of_a_plan_come_from_the_configuration():
    config = workflow_config([], REPO)
    models, datasets = downloads(config, planned_jobs(PAPER_PLAN_EXCERPT.splitlines()))
    evaluator = config["evaluation"]["noveltybench"]["evaluators"]["reward_model"]
    assert [(m.repo_id, m.folder) for m in models] == [
        ("Qwen/Qwen3-14B", "resources/hf/models/Qwen/Qwen3-14B"),
        (evaluator["hf_id"], "resources/hf/reward_model"),
    ]
    assert [(d.path, d.name, d.split, d.gated) for d in datasets] == [
        ("allenai/paloma", "mc4", "test", True),
        ("tinyBenchmarks/tinyMMLU", "all", "test", False),
    ]


def test_a_malformed_configuration_will_fail_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"seeds": "eleven"}))
    check, config = configuration_check([str(bad)], REPO)
    assert config is None and check.status == WILL_FAIL and "seeds" in check.detail
    check, config = configuration_check([str(REPO / "profiles/demo/demo.yaml")], REPO)
    assert check.status == OK and "tiny" in config["models"]


def test_a_failing_check_must_say_how_to_fix_it_and_sets_the_exit_status():
    with pytest.raises(ValueError, match="says how to fix it"):
        Check(WILL_FAIL, "x", "broken")
    assert exit_status([Check(OK, "a", "fine")]) == 0
    assert exit_status([Check(OK, "a", "fine"), Check(WILL_FAIL, "b", "broken", "mend it")]) == 1
    assert Check(WILL_FAIL, "b", "broken", "mend it").line().splitlines()[1].strip() == "fix: mend it"


def test_the_plan_parser_reads_wildcards_beside_resources():
    (job,) = planned_jobs(["rule x:", "    wildcards: a=1, b=c/d", "    resources: gpu=2, runtime=10"])
    assert job == PlannedJob("x", {"gpu": "2", "runtime": "10"}, {"a": "1", "b": "c/d"})
