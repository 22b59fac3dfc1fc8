"""The Hugging Face checks of `calibft preflight` (calibft.pipeline.preflight_hub), against the fake Hub of
tests/fake_hub.py: access to gated repositories, revisions, missing repositories, sizes from the file metadata,
what is already downloaded, the disk check, and a Hub that cannot be reached."""

import os
import re
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from calibft.pipeline.assets import HubDataset
from calibft.pipeline.preflight_checks import OK, WARNING, WILL_FAIL, Check
from calibft.pipeline.preflight_hub import ModelDownload, hub_checks, split_files
from tests.fake_hub import (
    ACCESS_TOKEN,
    INVALID_TOKEN,
    closed_port_url,
    fake_hub,  # noqa: F401  (a fixture)
    hub_env,
    point_at,
    serve,
)

WRONG_TOKEN = "hf_test_no_access_0123456789"
GIB = 1 << 30

# A gpt-oss-like listing: top-level shards, their index, configurations, tokenizer and chat template, plus the
# other formats' copies (original/, metal/) and repository files that a load does not read.
GPT_OSS_LOADED = {
    "config.json": 1_806,
    "generation_config.json": 177,
    "tokenizer_config.json": 4_200,
    "special_tokens_map.json": 98,
    "tokenizer.json": 27_868_174,
    "chat_template.jinja": 16_738,
    "model.safetensors.index.json": 36_355,
    "model-00000-of-00002.safetensors": 4_625_017_896,
    "model-00001-of-00002.safetensors": 4_115_586_736,
    "model-00002-of-00002.safetensors": 4_794_575_176,
}
GPT_OSS_NOT_LOADED = {
    ".gitattributes": 1_570,
    "README.md": 7_093,
    "LICENSE": 11_357,
    "USAGE_POLICY": 201,
    "original/config.json": 376,
    "original/dtypes.json": 13_324,
    "original/model.safetensors": 13_761_300_984,
    "metal/model.bin": 13_750_886_400,
}
# By hand: the ten loaded files' sizes.
GPT_OSS_BYTES = 1_806 + 177 + 4_200 + 98 + 27_868_174 + 16_738 + 36_355 + 4_625_017_896 + 4_115_586_736 + 4_794_575_176
GPT_OSS_COMMIT = "d666cf3b67006cf8227666739edf25164aaffdeb"

PALOMA_FILES = {
    ".gitattributes": 2_000,
    "README.md": 9_000,
    "ptb/test/test_ptb.jsonl.gz": 1_234_567,
    "ptb/val/val_ptb.jsonl.gz": 1_111_111,
    "wikitext_103/test/test_wikitext_103.jsonl.gz": 2_222_222,
    "wikitext_103/val/val_wikitext_103.jsonl.gz": 3_333_333,
}

REPOS = {
    "openai/gpt-oss-20b": {
        "revisions": {"main": GPT_OSS_COMMIT},
        "files": {**GPT_OSS_LOADED, **GPT_OSS_NOT_LOADED},
    },
    "google/gemma-3-1b-it": {
        "gated": True,
        "files": {"config.json": 900, "tokenizer.json": 33_000_000, "model.safetensors": 1_999_811_208},
    },
    "Qwen/Qwen3-0.6B": {
        "files": {"config.json": 726, "tokenizer.json": 11_422_654, "model.safetensors": 1_503_300_328}
    },
    "datasets/allenai/paloma": {"gated": True, "files": PALOMA_FILES},
    "datasets/tinyBenchmarks/tinyGSM8k": {
        "files": {"main/test-00000-of-00001.parquet": 150_000, "main/train-00000-of-00001.parquet": 2_500_000},
    },
    "datasets/org/odd-layout": {"files": {"README.md": 100, "rows.csv": 5_000}},
}

GEMMA = ModelDownload("google/gemma-3-1b-it", "main", "resources/hf/models/google/gemma-3-1b-it")
QWEN = ModelDownload("Qwen/Qwen3-0.6B", "main", "resources/hf/models/Qwen/Qwen3-0.6B")
PALOMA_PTB = HubDataset("allenai/paloma", "test", "main", name="ptb", gated=True)


@pytest.fixture
def hub(fake_hub, monkeypatch, tmp_path):  # noqa: F811  (the fixture imported above)
    """The fake Hub of REPOS, this process's huggingface_hub pointed at it without a token, and the working
    directory a fresh one (the models' folders are relative to it)."""
    monkeypatch.chdir(tmp_path)
    return fake_hub(REPOS)


def run(models=(), datasets=(), token=None, root="resources") -> list[Check]:
    """hub_checks, asserting what every call must: one line per repository then the disk line, no token."""
    checks = hub_checks(models, datasets, root, token)
    assert len(checks) == len(models) + len(datasets) + 1
    assert checks[-1].subject == f"disk {root}"
    for token_ in (ACCESS_TOKEN, WRONG_TOKEN, INVALID_TOKEN):
        assert all(token_ not in check.line() for check in checks)
    return checks


def bytes_in(check: Check) -> int:
    """The exact bytes a line gives as to download."""
    (match,) = re.findall(r"\(([\d,]+) bytes\) to download", check.detail)
    return int(match.replace(",", ""))


def gpt_oss(folder="resources/hf/models/openai/gpt-oss-20b", revision="main") -> ModelDownload:
    return ModelDownload("openai/gpt-oss-20b", revision, folder)


def test_a_gated_model_without_a_token_will_fail_naming_it_and_its_page(hub):
    check, _ = run([GEMMA])
    assert check.status == WILL_FAIL
    assert "google/gemma-3-1b-it" in check.detail and "no Hugging Face token is set" in check.detail
    assert "https://huggingface.co/google/gemma-3-1b-it" in check.fix
    assert "HF_TOKEN" in check.fix and "hf auth login" in check.fix


def test_a_gated_model_with_a_token_of_an_account_with_access_is_ok(hub):
    check, _ = run([GEMMA], token=ACCESS_TOKEN)
    assert check.status == OK, check.line()
    assert bytes_in(check) == 900 + 33_000_000 + 1_999_811_208
    assert f"Bearer {ACCESS_TOKEN}" in {r.authorization for r in hub.requests if r.path.endswith("/auth-check")}


def test_a_gated_model_with_a_token_without_access_says_so_not_that_no_token_is_set(hub):
    check, _ = run([GEMMA], token=WRONG_TOKEN)
    assert check.status == WILL_FAIL
    assert "the token in use has no access" in check.detail and "no Hugging Face token" not in check.detail
    assert "https://huggingface.co/google/gemma-3-1b-it" in check.fix


def test_a_token_the_hub_does_not_know_will_fail_saying_so(hub):
    checks = run([QWEN], [HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main")], token=INVALID_TOKEN)
    for check in checks[:-1]:
        assert check.status == WILL_FAIL and "refused the token in use (HTTP 401)" in check.detail
        assert "set HF_TOKEN to a valid token" in check.fix


def test_a_token_quoted_by_an_error_message_is_masked(hub, monkeypatch):
    from huggingface_hub import HfApi

    def auth_check(self, repo_id, *, repo_type=None, token=None, write=False):
        raise RuntimeError(f"cannot check {repo_id} with {token}")

    monkeypatch.setattr(HfApi, "auth_check", auth_check)
    check, _ = run([QWEN], token=WRONG_TOKEN)
    assert check.status == WILL_FAIL and "with hf_***" in check.detail


def test_a_gated_dataset_without_a_token_will_fail_and_with_access_sums_its_split(hub):
    check, _ = run(datasets=[PALOMA_PTB])
    assert check.status == WILL_FAIL
    assert "allenai/paloma" in check.line() and "no Hugging Face token is set" in check.detail
    assert "https://huggingface.co/datasets/allenai/paloma" in check.fix

    check, _ = run(datasets=[PALOMA_PTB], token=ACCESS_TOKEN)
    assert check.status == OK, check.line()
    assert bytes_in(check) == 1_234_567  # ptb/test/ alone: not ptb/val/, not wikitext_103/test/


def test_a_dataset_configured_as_gated_needs_a_token_even_when_the_hub_answers_without(hub):
    tiny = HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main", gated=True)
    check, _ = run(datasets=[tiny])
    assert check.status == WILL_FAIL and "no Hugging Face token is set" in check.detail


def test_a_datasets_bytes_are_its_configuration_and_splits_files(hub):
    tiny = HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main")
    check, _ = run(datasets=[tiny])
    assert check.status == OK and bytes_in(check) == 150_000


def test_a_dataset_whose_split_files_are_not_recognized_is_ok_with_its_size_unknown(hub):
    odd = HubDataset("org/odd-layout", "test", "main")
    check, disk = run(datasets=[odd])
    assert check.status == OK and "size not known from the listing" in check.detail
    assert disk.status == OK and "org/odd-layout" in disk.detail  # named as not counted


def test_split_files_match_the_configuration_as_a_folder_and_the_split_as_a_folder_or_a_prefix():
    names = [
        "data/test-00000-of-00001.parquet",
        "data/train-00000-of-00001.parquet",
        "data/testing-notes.txt",
        "wikitext_103/test/test_wikitext_103.jsonl.gz",
        "c4_en/test/test_c4_en.jsonl.gz",
        "wikitext_103/val/val_wikitext_103.jsonl.gz",
        "README.md",
    ]
    assert split_files(names, HubDataset("d", "test", "main")) == [
        "data/test-00000-of-00001.parquet",
        "wikitext_103/test/test_wikitext_103.jsonl.gz",
        "c4_en/test/test_c4_en.jsonl.gz",
    ]
    assert split_files(names, HubDataset("d", "test", "main", name="default")) == split_files(
        names, HubDataset("d", "test", "main")
    )
    assert split_files(names, HubDataset("d", "test", "main", name="wikitext_103")) == [
        "wikitext_103/test/test_wikitext_103.jsonl.gz"
    ]
    assert split_files(names, HubDataset("d", "test", "main", name="ptb")) == []


def test_a_revision_that_does_not_resolve_will_fail_with_the_fix(hub):
    check, _ = run([gpt_oss(revision="v9.9")])
    assert check.status == WILL_FAIL
    assert "revision v9.9" in check.detail and "openai/gpt-oss-20b" in check.detail
    assert "pin an existing revision (a branch, tag or 40-hex commit) in config.yaml" in check.fix

    check, _ = run(datasets=[HubDataset("tinyBenchmarks/tinyGSM8k", "test", "nope", name="main")])
    assert check.status == WILL_FAIL and "revision nope" in check.detail and "pin an existing revision" in check.fix


def test_a_commit_resolves_as_itself(hub):
    check, _ = run([gpt_oss(revision=GPT_OSS_COMMIT)])
    assert check.status == OK and f"commit {GPT_OSS_COMMIT[:7]}" in check.detail


def test_a_repository_that_does_not_exist_will_fail(hub):
    missing = ModelDownload("nobody/no-such-model", "main", "resources/hf/models/nobody/no-such-model")
    check, _ = run([missing])
    assert check.status == WILL_FAIL and "does not exist" in check.detail and "nobody/no-such-model" in check.detail
    assert "https://huggingface.co/nobody/no-such-model" in check.fix

    check, _ = run(datasets=[HubDataset("nobody/no-such-dataset", "test", "main")])
    assert check.status == WILL_FAIL and "does not exist" in check.detail
    assert "https://huggingface.co/datasets/nobody/no-such-dataset" in check.fix


def test_the_bytes_are_the_sum_of_the_files_a_load_reads(hub):
    check, disk = run([gpt_oss()])
    assert check.status == OK, check.line()
    assert bytes_in(check) == GPT_OSS_BYTES
    assert f"revision main → commit {GPT_OSS_COMMIT[:7]}, 10 files" in check.detail
    assert "13.6 GB" in check.detail  # 13,562,107,356 bytes
    assert "(0.0 GB already in resources/hf/models/openai/gpt-oss-20b)" in check.detail
    assert bytes_in(disk) == GPT_OSS_BYTES


def test_a_file_already_in_the_folder_with_the_hubs_size_is_not_counted_again(hub):
    folder = Path("resources/hf/models/openai/gpt-oss-20b")
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(b"x" * 1_806)  # the Hub's size: there
    (folder / "generation_config.json").write_bytes(b"x" * 10)  # another size: to download again
    (folder / "README.md").write_bytes(b"x" * 7_093)  # not a file a load reads: not in the bytes either way
    check, disk = run([gpt_oss()])
    assert check.status == OK
    assert bytes_in(check) == GPT_OSS_BYTES - 1_806 == bytes_in(disk)


def test_models_and_datasets_add_up_on_the_disk_line(hub):
    tiny = HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main")
    *_, disk = run([gpt_oss(), QWEN], [tiny])
    assert bytes_in(disk) == GPT_OSS_BYTES + (726 + 11_422_654 + 1_503_300_328) + 150_000


Usage = namedtuple("Usage", "total used free")


def free_space(monkeypatch, free: int) -> list[Path]:
    """Make shutil.disk_usage report `free` bytes; returns the paths it was asked about."""
    asked = []

    def disk_usage(path):
        asked.append(Path(path))
        return Usage(10 * free, 9 * free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    return asked


def test_the_disk_check_will_fail_when_the_bytes_exceed_the_free_space(hub, monkeypatch, tmp_path):
    asked = free_space(monkeypatch, 10 * GIB)
    *_, disk = run([gpt_oss()])
    assert disk.status == WILL_FAIL
    assert "free" in disk.fix and "ln -s" in disk.fix
    assert asked == [tmp_path]  # resources/ does not exist yet: its nearest existing parent
    assert "13.6 GB" in disk.detail and "10.7 GB" in disk.detail


def test_the_disk_check_is_ok_with_room_to_spare_and_warns_when_little_would_remain(hub, monkeypatch):
    free_space(monkeypatch, 100 * GIB)
    *_, disk = run([gpt_oss()])
    assert disk.status == OK and "107.4 GB" in disk.detail and f"{GPT_OSS_BYTES:,} bytes" in disk.detail

    free_space(monkeypatch, GPT_OSS_BYTES + GPT_OSS_BYTES // 20)  # 5% of it left
    *_, disk = run([gpt_oss()])
    assert disk.status == WARNING and "10%" in disk.detail


def test_every_repository_gets_its_own_line(hub):
    missing = ModelDownload("nobody/no-such-model", "main", "resources/hf/models/nobody/no-such-model")
    checks = run([GEMMA, missing, QWEN, gpt_oss(revision="v9.9")], [PALOMA_PTB])
    assert [c.status for c in checks[:-1]] == [WILL_FAIL, WILL_FAIL, OK, WILL_FAIL, WILL_FAIL]
    names = ["google/gemma-3-1b-it", "nobody/no-such-model", "Qwen/Qwen3-0.6B", "openai/gpt-oss-20b", "allenai/paloma"]
    assert all(name in check.subject for name, check in zip(names, checks, strict=False))


def test_an_unreachable_hub_will_fail_saying_so_for_each_repository(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    point_at(monkeypatch, closed_port_url(), home=tmp_path / "hf_home", token=WRONG_TOKEN)
    checks = run([GEMMA, QWEN], [PALOMA_PTB], token=WRONG_TOKEN)
    for check in checks[:-1]:
        assert check.status == WILL_FAIL and "could not be reached from here" in check.detail
        assert "run preflight where the workflow's downloads run" in check.fix
    assert "hf download Qwen/Qwen3-0.6B --revision main" in checks[1].fix
    assert checks[-1].status == WARNING and "not known" in checks[-1].detail


def test_offline_mode_will_fail_saying_to_unset_it(hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    check, _ = run([QWEN])
    assert check.status == WILL_FAIL and "HF_HUB_OFFLINE" in check.detail and "unset HF_HUB_OFFLINE" in check.fix


def test_a_subprocess_reaches_the_fake_hub_through_hf_endpoint(tmp_path):
    script = (
        "from calibft.pipeline.preflight_hub import ModelDownload, hub_checks\n"
        "from calibft.pipeline.assets import hub_token\n"
        "models = [ModelDownload('google/gemma-3-1b-it', 'main', 'resources/hf/models/google/gemma-3-1b-it')]\n"
        "print('\\n'.join(c.line() for c in hub_checks(models, [], 'resources', hub_token())))\n"
    )
    with serve(REPOS) as server:
        for token, status in [(None, WILL_FAIL), (ACCESS_TOKEN, OK)]:
            env = hub_env(server.url, home=tmp_path / "hf_home", token=token)
            done = subprocess.run(
                [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(f"{status:<9}  hub google/gemma-3-1b-it: "), done.stdout
            assert ACCESS_TOKEN not in done.stdout
        assert {r.authorization for r in server.requests} >= {None, f"Bearer {ACCESS_TOKEN}"}
    assert os.environ.get("HF_ENDPOINT") != server.url  # the subprocess's environment, not this one's
