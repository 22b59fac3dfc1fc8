import dataclasses
import hashlib
import json
import socket
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from calibft.evals.tinybench import gpirt
from calibft.pipeline.assets import (
    NOVELTYBENCH_COMMIT,
    NOVELTYBENCH_PROMPTS,
    OPEN_ENDED_PROMPTS,
    TINYBENCHMARKS_PARAMS,
    Asset,
    AssetError,
    cache_path,
    fetch,
    git_blob_id,
    identity_mismatch,
    jsonl_prompts,
    sha256_of,
    verify_snapshot,
)
from tests.pickles import assert_plain_pickle_runs_it, touching_pickle

CONTENT = b'["Name a random city. Output ONLY the answer."]\n'


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """A local HTTP server for a folder holding `prompts.json`; yields (base URL, stop function)."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "prompts.json").write_bytes(CONTENT)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    stopped = False

    def stop():
        nonlocal stopped
        if not stopped:
            httpd.shutdown()
            httpd.server_close()
            thread.join()
            stopped = True

    yield f"http://127.0.0.1:{httpd.server_address[1]}", stop
    stop()


def _asset(url: str, content: bytes = CONTENT) -> Asset:
    return Asset("test prompts", url, hashlib.sha256(content).hexdigest(), "prompts.json")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_verifies_and_caches(server, tmp_path):
    base, stop = server
    asset = _asset(f"{base}/prompts.json")
    cache = tmp_path / "cache"
    path = fetch(asset, cache)
    assert path == cache_path(asset, cache) == cache / "prompts.json"
    assert path.read_bytes() == CONTENT and sha256_of(path) == asset.sha256
    assert _leftovers(cache) == ["prompts.json"]
    stop()  # the cached copy is used without any network access
    assert fetch(asset, cache, timeout=2) == path
    assert path.read_bytes() == CONTENT


def test_a_corrupted_cached_copy_is_downloaded_again(server, tmp_path):
    base, _ = server
    asset = _asset(f"{base}/prompts.json")
    (tmp_path / "prompts.json").write_bytes(b"truncated")
    assert fetch(asset, tmp_path).read_bytes() == CONTENT


def test_checksum_mismatch_raises_and_leaves_nothing(server, tmp_path):
    base, _ = server
    asset = _asset(f"{base}/prompts.json", content=b"something else")
    cache = tmp_path / "cache"
    with pytest.raises(AssetError) as err:
        fetch(asset, cache)
    message = str(err.value)
    assert asset.sha256 in message and hashlib.sha256(CONTENT).hexdigest() in message and "deleted" in message
    assert _leftovers(cache) == []


def test_unreachable_url_says_how_to_provide_the_file(tmp_path):
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/prompts.json"
        asset = _asset(url)
        with pytest.raises(AssetError) as err:
            fetch(asset, tmp_path / "cache", timeout=2)
    message = str(err.value)
    assert url in message and asset.sha256 in message and "download it elsewhere" in message
    assert str((tmp_path / "cache" / "prompts.json").resolve()) in message
    assert _leftovers(tmp_path / "cache") == []


def test_missing_file_on_the_server_is_an_asset_error(server, tmp_path):
    base, _ = server
    with pytest.raises(AssetError, match="404"):
        fetch(_asset(f"{base}/missing.json"), tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []


def test_asset_validation_and_the_pinned_prompts():
    with pytest.raises(ValueError, match="sha256"):
        Asset("x", "http://example.invalid/x", "ABC", "x.json")
    with pytest.raises(ValueError, match="filename"):
        Asset("x", "http://example.invalid/x", "0" * 64, "sub/x.json")
    assert OPEN_ENDED_PROMPTS.sha256 == "343c78f3572ae5a685d25ed41b5eea3577615d0cbccbc69a6a39f06bd9092bd1"
    assert "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab" in OPEN_ENDED_PROMPTS.url
    assert OPEN_ENDED_PROMPTS.url.endswith("benchmarks/open_random_gen/prompts.json")


JSONL = b'{"id": "curated-0", "prompt": "Pick a random fruit."}\n{"id": "curated-1", "prompt": "Name a city."}\n'


def _checked_asset(url: str, count: int) -> Asset:
    return Asset("test jsonl prompts", url, None, "prompts.jsonl", check=jsonl_prompts(count))


def test_without_a_checksum_the_content_check_decides(server, tmp_path):
    base, stop = server
    (tmp_path / "served" / "prompts.jsonl").write_bytes(JSONL)
    cache = tmp_path / "cache"
    with pytest.raises(AssetError, match="2 prompts, expected 3"):
        fetch(_checked_asset(f"{base}/prompts.jsonl", 3), cache)
    assert _leftovers(cache) == []
    path = fetch(_checked_asset(f"{base}/prompts.jsonl", 2), cache)
    assert path.read_bytes() == JSONL
    stop()  # a cached copy that passes the check is used without the network
    assert fetch(_checked_asset(f"{base}/prompts.jsonl", 2), cache, timeout=2) == path
    path.write_bytes(JSONL[: JSONL.index(b"\n") + 1])  # damaged: one prompt left, so it is fetched again
    with pytest.raises(AssetError, match="cannot download"):
        fetch(_checked_asset(f"{base}/prompts.jsonl", 2), cache, timeout=2)


def test_jsonl_prompts_check(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(JSONL + b"\n")
    jsonl_prompts(2)(path)  # blank lines do not count
    path.write_bytes(JSONL.replace(b'"Name a city."', b'""'))
    with pytest.raises(ValueError, match="line 2"):
        jsonl_prompts(2)(path)
    path.write_bytes(b"[1]\n")
    with pytest.raises(ValueError, match="line 1"):
        jsonl_prompts(1)(path)


NOVELTYBENCH_BLOBS = {  # the copies the authors' release vendors (benchmarks/noveltybench/ at a09d46dc5f6a)
    "curated": "a83cbd794a1b11794464dcd9604357ea3d06cb30",
    "wildchat": "c70993718a33628ec860b4c273a5a7b5dab09072",
}


def test_noveltybench_prompts_are_pinned_to_the_authors_commit_and_content(tmp_path):
    with pytest.raises(ValueError, match="content check"):
        Asset("x", "http://example.invalid/x", None, "x.jsonl")
    assert NOVELTYBENCH_COMMIT == "984876e92a5eefe6945f273b8c8543a4e6cff070"
    (tmp_path / "two.jsonl").write_bytes(JSONL)
    for split, count in [("curated", 100), ("wildchat", 1000)]:
        asset = NOVELTYBENCH_PROMPTS[split]
        assert f"/novelty-bench/novelty-bench/{NOVELTYBENCH_COMMIT}/data/" in asset.url
        assert asset.git_blob == NOVELTYBENCH_BLOBS[split] and asset.sha256 is None
        with pytest.raises(ValueError, match=f"2 prompts, expected {count}"):
            asset.check(tmp_path / "two.jsonl")
        expected = f"expected git blob id {asset.git_blob}, got {git_blob_id(tmp_path / 'two.jsonl')}"
        assert identity_mismatch(asset, tmp_path / "two.jsonl") == expected


def _hundred_prompts() -> bytes:
    """A file that passes the curated split's row count but is not the benchmark's."""
    return b"".join(json.dumps({"id": f"curated-{i}", "prompt": f"Prompt {i}?"}).encode() + b"\n" for i in range(100))


def test_a_noveltybench_file_of_other_content_is_refused_with_both_hashes(server, tmp_path):
    """The row count alone would take any 100 prompts; the git blob id refuses them, cached or downloaded."""
    base, stop = server
    (tmp_path / "served" / "curated.jsonl").write_bytes(_hundred_prompts())
    asset = dataclasses.replace(NOVELTYBENCH_PROMPTS["curated"], url=f"{base}/curated.jsonl")
    cache = tmp_path / "cache"
    cache.mkdir()
    placed = cache_path(asset, cache)
    placed.write_bytes(_hundred_prompts())  # placed by hand: passes the content check, not the pin
    asset.check(placed)
    wrong = git_blob_id(placed)
    with pytest.raises(AssetError) as err:  # not taken from the cache, and its download refused
        fetch(asset, cache)
    message = str(err.value)
    assert f"expected git blob id {NOVELTYBENCH_BLOBS['curated']}, got {wrong}" in message
    assert "deleted unread" in message and asset.url in message
    stop()  # offline, the message asks for the file by its git blob id
    with pytest.raises(AssetError, match="cannot download") as err:
        fetch(asset, cache, timeout=2)
    assert f"git blob id {NOVELTYBENCH_BLOBS['curated']}" in str(err.value) and str(placed.resolve()) in str(err.value)


def test_the_demo_reads_its_configured_noveltybench_prompts_without_the_pin():
    """Configured prompt files (the demo's few fixtures) go to the jobs as they are: no rule fetches them, so the
    pinned identity, which they do not have, never applies to them."""
    from snakemake.utils import validate

    from calibft.pipeline.config import read_config
    from calibft.pipeline.layout import Layout

    repo = Path(__file__).resolve().parents[1]
    config = read_config(repo / "profiles" / "demo" / "demo.yaml")
    validate(config, str(repo / "schemas" / "config.schema.yaml"))
    demo = Layout(config, str(repo))
    for split, fixture in config["evaluation"]["noveltybench"]["prompts_files"].items():
        path = demo.noveltybench_prompts(split)
        assert path == str(repo / fixture) and path != str(cache_path(NOVELTYBENCH_PROMPTS[split], "resources"))
        assert identity_mismatch(NOVELTYBENCH_PROMPTS[split], path) is not None


class _Info:
    sha = "0123456789abcdef0123456789abcdef01234567"


class _Builder:
    """What `export_dataset` uses of a `datasets` builder: the commit it resolved (`hash`), its configuration's data
    files per split (none listed: the builder is used as it is), its features, and the rows."""

    def __init__(self, commit, rows, data_files=None):
        self.hash, self._rows, self.prepared = commit, rows, False
        self.config = SimpleNamespace(data_files=data_files)
        self.info = SimpleNamespace(features=None)

    def download_and_prepare(self):
        self.prepared = True

    def as_dataset(self, split):
        import datasets

        assert self.prepared and split == "test"
        return datasets.Dataset.from_list(self._rows)


def _fake_builder(calls, rows=({"question": "1 + 1?", "answer": "2"},), resolved=None):
    """A stand-in for `datasets.load_dataset_builder` that records its calls; its builder reads commit `resolved`
    (default: the revision asked for)."""

    def fake(path, name, revision, token, data_files=None, features=None):
        calls.append((path, name, revision))
        return _Builder(resolved or revision, list(rows), data_files)

    return fake


def test_export_dataset_writes_rows_in_order_at_the_resolved_commit(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    calls, rows = [], [{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}]
    monkeypatch.setattr(datasets, "load_dataset_builder", _fake_builder(calls, rows))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    out = tmp_path / "items.jsonl"
    commit = export_dataset(HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main"), out)
    assert commit == _Info.sha
    assert calls == [("tinyBenchmarks/tinyGSM8k", "main", _Info.sha)]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}]


def _two_split_dataset(folder: Path) -> Path:
    """A dataset folder with a `test` split of two rows and a `train` split whose file is not JSON: preparing the
    train split fails, so an export that reads it cannot pass."""
    (folder / "data").mkdir(parents=True)
    rows = [{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}]
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "data" / "train.jsonl").write_text("{not json: the train split must not be read\n")
    return folder


def test_export_dataset_prepares_only_the_split_it_exports(tmp_path, monkeypatch):
    """`datasets` itself, on a local folder in place of the Hub's repository: the builder `export_dataset` prepares
    lists the test split's file alone, and the other split's unreadable file is never read."""
    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    real, local, calls = datasets.load_dataset_builder, _two_split_dataset(tmp_path / "repo"), []

    def from_the_folder(path, name, revision, token, data_files=None, features=None):
        calls.append(data_files)
        builder = real(str(local), name, data_files=data_files, features=features, cache_dir=str(tmp_path / "c"))
        builder.hash = revision  # a local folder has no commit: the one asked for
        return builder

    whole = real(str(local), cache_dir=str(tmp_path / "whole"))
    assert set(whole.config.data_files) == {"train", "test"}
    with pytest.raises(datasets.exceptions.DatasetGenerationError):  # the trap: preparing every split fails
        whole.download_and_prepare()
    monkeypatch.setattr(datasets, "load_dataset_builder", from_the_folder)
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    out = tmp_path / "items.jsonl"
    assert export_dataset(HubDataset("org/two-splits", "test", "main"), out) == _Info.sha
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}]
    assert calls[0] is None and list(calls[1]) == ["test"]
    assert [Path(f).name for f in calls[1]["test"]] == ["test.jsonl"]


def test_export_dataset_asks_for_the_split_files_at_the_same_commit(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    calls, asked = [], []
    files = {"train": ["hf://datasets/org/d@c/train.parquet"], "test": ["hf://datasets/org/d@c/test.parquet"]}

    def fake(path, name, revision, token, data_files=None, features=None):
        calls.append((path, name, revision))
        asked.append(data_files)
        listed = files if data_files is None else data_files  # the second builder lists what it was given
        return _Builder(revision if data_files is None else "f" * 40, [{"q": "?"}], listed)

    monkeypatch.setattr(datasets, "load_dataset_builder", fake)
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    with pytest.raises(AssetError) as err:  # the split's builder is held to the commit as the first one is
        export_dataset(HubDataset("org/d", "test", "main", name="x"), tmp_path / "o.jsonl")
    assert f"expected commit {_Info.sha}, got {'f' * 40}" in str(err.value) and not (tmp_path / "o.jsonl").exists()
    assert calls == [("org/d", "x", _Info.sha)] * 2
    assert asked[0] is None and dict(asked[1]) == {"test": files["test"]}


def test_a_gated_dataset_without_a_token_names_the_terms_to_accept(tmp_path, monkeypatch):
    from calibft.pipeline.assets import HubDataset, export_dataset

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no token stored by `hf auth login` either
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("allenai/paloma", "test", "main", name="ptb", gated=True), tmp_path / "ptb.jsonl")
    message = str(err.value)
    assert "allenai/paloma" in message and "https://huggingface.co/datasets/allenai/paloma" in message
    assert "HF_TOKEN" in message and "ptb" in message
    assert not (tmp_path / "ptb.jsonl").exists()


class _Refusal:
    """The parts of an HTTP response that the hub's errors read."""

    def __init__(self):
        self.headers, self.request = {}, None


def test_a_token_without_access_to_a_gated_dataset_names_the_terms_to_accept(tmp_path, monkeypatch):
    """`datasets` raises a refused download as DatasetNotFoundError from the hub's GatedRepoError."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError

    from calibft.pipeline.assets import HubDataset, export_dataset

    def refused(path, name, revision, token, **kwargs):
        try:
            raise GatedRepoError("403 Client Error: access to this dataset is restricted", response=_Refusal())
        except GatedRepoError as err:
            raise DatasetNotFoundError(f"Dataset '{path}' is a gated dataset on the Hub.") from err

    monkeypatch.setenv("HF_TOKEN", "hf_without_access")
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    monkeypatch.setattr(datasets, "load_dataset_builder", refused)
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("allenai/paloma", "test", "main", name="ptb", gated=True), tmp_path / "ptb.jsonl")
    message = str(err.value)
    assert "this token has no access" in message and "https://huggingface.co/datasets/allenai/paloma" in message
    assert not (tmp_path / "ptb.jsonl").exists()


def test_an_unreachable_hub_says_how_to_export_the_dataset_elsewhere(tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    def offline(self, path, revision, token):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "dataset_info", offline)
    out = tmp_path / "mmlu.jsonl"
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("tinyBenchmarks/tinyMMLU", "test", "main"), out)
    message = str(err.value)
    assert "tinyBenchmarks/tinyMMLU" in message and str(out.resolve()) in message and "to_json" in message
    assert not out.exists()


def test_export_dataset_locks_the_branch_and_keeps_its_commit_when_it_moves(tmp_path, monkeypatch, caplog):
    import logging

    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    upstream, downloads = {"sha": "a" * 40}, []

    class Info:
        def __init__(self):
            self.sha = upstream["sha"]

    monkeypatch.setattr(datasets, "load_dataset_builder", _fake_builder(downloads))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: Info())
    locks, dataset = tmp_path / "locks", HubDataset("tinyBenchmarks/tinyMMLU", "test", "main")
    lock = locks / "datasets" / "tinyBenchmarks__tinyMMLU.json"
    with caplog.at_level(logging.INFO, logger="calibft"):
        assert export_dataset(dataset, tmp_path / "a.jsonl", lock_dir=locks) == "a" * 40
        assert json.loads(lock.read_text())["commit"] == "a" * 40 and f"locked to commit {'a' * 40}" in caplog.text
        upstream["sha"] = "b" * 40  # the branch moves: the locked commit is downloaded, with a warning
        caplog.clear()
        assert export_dataset(dataset, tmp_path / "b.jsonl", lock_dir=locks) == "a" * 40
    assert [revision for _, _, revision in downloads] == ["a" * 40, "a" * 40]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "b" * 40 in warning.getMessage() and str(lock) in warning.getMessage()

    def offline(self, path, revision, token):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "dataset_info", offline)  # offline: the lock still says what to download
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="calibft"):
        assert export_dataset(dataset, tmp_path / "c.jsonl", lock_dir=locks) == "a" * 40
    assert "could not check" in caplog.text and "ConnectionError" in caplog.text


def test_a_corrupt_lock_stops_the_export_and_names_the_file(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset
    from calibft.pipeline.locks import LockError

    downloads = []
    monkeypatch.setattr(datasets, "load_dataset_builder", _fake_builder(downloads))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    lock = tmp_path / "locks" / "datasets" / "allenai__paloma.json"
    lock.parent.mkdir(parents=True)
    lock.write_text("{")
    with pytest.raises(LockError, match="corrupt") as err:
        export_dataset(
            HubDataset("allenai/paloma", "test", "main", name="ptb"), tmp_path / "p.jsonl", tmp_path / "locks"
        )
    assert str(lock) in str(err.value) and downloads == [] and not (tmp_path / "p.jsonl").exists()


SNAPSHOT_FILES = {"config.json": b"{}\n", "model.safetensors": b"weights" * 100, "README.md": b"# card\n"}


def _fake_hub(monkeypatch, upstream: dict, files: dict[str, bytes], served_commit: str | None = None) -> list:
    """The Hub for `snapshot`: `model_info` resolves a branch to `upstream["sha"]` (a commit to itself) and lists
    `files` with their sizes; `snapshot_download` writes the files its allow_patterns match, with download
    records of `served_commit` (default: the commit asked for). Returns the recorded downloads (commit,
    allow_patterns)."""
    import fnmatch

    import huggingface_hub
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoSibling

    from calibft.pipeline.locks import is_commit

    downloads = []

    def model_info(self, repo_id, revision, files_metadata=False, token=None):
        siblings = [RepoSibling(rfilename=n, size=len(c)) for n, c in files.items()] if files_metadata else None
        return SimpleNamespace(sha=revision if is_commit(revision) else upstream["sha"], siblings=siblings)

    def snapshot_download(repo_id, revision, local_dir, allow_patterns):
        downloads.append((revision, allow_patterns))
        taken = {n: c for n, c in files.items() if any(fnmatch.fnmatchcase(n, p) for p in allow_patterns)}
        _write_snapshot(local_dir, served_commit or revision, taken)

    monkeypatch.setattr(HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return downloads


def test_snapshot_downloads_the_locked_commit(tmp_path, monkeypatch):
    from calibft.pipeline.assets import snapshot

    upstream = {"sha": "c" * 40}
    downloads = _fake_hub(monkeypatch, upstream, SNAPSHOT_FILES)
    locks = tmp_path / "locks"
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    upstream["sha"] = "d" * 40
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    assert snapshot("org/evaluator", "e" * 40, tmp_path / "m", lock_dir=locks) == "e" * 40  # a commit: as given
    assert snapshot("org/evaluator", "main", tmp_path / "m") == "d" * 40  # no lock_dir: the branch, as before
    assert [commit for commit, _ in downloads] == ["c" * 40, "c" * 40, "e" * 40, "d" * 40]
    assert json.loads((locks / "models" / "org__evaluator.json").read_text())["commit"] == "c" * 40


# Listings shaped like the Hub's for the repositories the workflow downloads (sizes made up): what a
# `from_pretrained` load reads is taken, other formats' copies and the repository's documents are not.
GPT_OSS_LIKE = {
    ".gitattributes": 1_000,
    "LICENSE": 11_000,
    "README.md": 7_000,
    "USAGE_POLICY": 200,
    "chat_template.jinja": 16_000,
    "config.json": 1_800,
    "generation_config.json": 170,
    "metal/model.bin": 13_000_000_000,
    "model-00000-of-00002.safetensors": 4_000_000_000,
    "model-00001-of-00002.safetensors": 4_500_000_000,
    "model-00002-of-00002.safetensors": 4_300_000_000,
    "model.safetensors.index.json": 36_000,
    "original/config.json": 370,
    "original/model--00001-of-00002.safetensors": 7_000_000_000,
    "special_tokens_map.json": 98,
    "tokenizer.json": 27_000_000,
    "tokenizer_config.json": 4_200,
}
LLAMA_LIKE = {
    ".gitattributes": 1_500,
    "LICENSE.txt": 7_700,
    "README.md": 41_000,
    "USE_POLICY.md": 6_000,
    "config.json": 877,
    "generation_config.json": 189,
    "model.safetensors": 2_400_000_000,
    "original/consolidated.00.pth": 2_400_000_000,
    "original/params.json": 220,
    "original/tokenizer.model": 2_100_000,
    "special_tokens_map.json": 296,
    "tokenizer.json": 9_000_000,
    "tokenizer_config.json": 54_000,
}
BIN_ONLY = {  # a DeBERTa classifier without safetensors, its sentencepiece vocabulary, and others' weights
    "README.md": 1_000,
    "added_tokens.json": 23,
    "config.json": 900,
    "flax_model.msgpack": 1_700_000_000,
    "model.onnx": 1_700_000_000,
    "pytorch_model.bin": 1_700_000_000,
    "special_tokens_map.json": 170,
    "spm.model": 2_400_000,
    "tf_model.h5": 1_700_000_000,
    "tokenizer_config.json": 400,
    "training_args.bin": 4_000,
}
SHARDED_BIN_AND_GGUF = {
    "config.json": 700,
    "merges.txt": 450_000,
    "model-q4.gguf": 900_000_000,
    "pytorch_model-00001-of-00002.bin": 9_000_000_000,
    "pytorch_model-00002-of-00002.bin": 4_000_000_000,
    "pytorch_model.bin.index.json": 24_000,
    "vocab.json": 800_000,
}
BOTH_FORMATS = {  # safetensors are preferred: the PyTorch weights and their index are left
    "config.json": 700,
    "model.safetensors": 500_000_000,
    "pytorch_model.bin": 500_000_000,
    "pytorch_model.bin.index.json": 1_000,
    "rng_state.pth": 14_000,
}


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        (
            GPT_OSS_LIKE,
            [
                "chat_template.jinja",
                "config.json",
                "generation_config.json",
                "model-00000-of-00002.safetensors",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "special_tokens_map.json",
                "tokenizer.json",
                "tokenizer_config.json",
            ],
        ),
        (
            LLAMA_LIKE,
            [
                "config.json",
                "generation_config.json",
                "model.safetensors",
                "special_tokens_map.json",
                "tokenizer.json",
                "tokenizer_config.json",
            ],
        ),
        (
            BIN_ONLY,
            [
                "added_tokens.json",
                "config.json",
                "pytorch_model.bin",
                "special_tokens_map.json",
                "spm.model",
                "tokenizer_config.json",
            ],
        ),
        (
            SHARDED_BIN_AND_GGUF,
            [
                "config.json",
                "merges.txt",
                "pytorch_model-00001-of-00002.bin",
                "pytorch_model-00002-of-00002.bin",
                "pytorch_model.bin.index.json",
                "vocab.json",
            ],
        ),
        (BOTH_FORMATS, ["config.json", "model.safetensors"]),
    ],
    ids=["gpt-oss", "llama", "bin-only", "sharded-bin", "both-formats"],
)
def test_a_download_takes_the_files_a_load_reads(listing, expected):
    from calibft.pipeline.assets import HubFile, bytes_to_download, files_to_download

    files = [HubFile(name, size) for name, size in listing.items()]
    assert files_to_download(files) == expected
    assert bytes_to_download(files) == sum(listing[name] for name in expected)


def test_the_selected_bytes_of_the_gpt_oss_and_llama_listings():
    from calibft.pipeline.assets import HubFile, bytes_to_download

    gpt_oss = [HubFile(name, size) for name, size in GPT_OSS_LIKE.items()]
    assert bytes_to_download(gpt_oss) == 12_800_000_000 + 1_800 + 170 + 16_000 + 36_000 + 98 + 27_000_000 + 4_200
    llama = [HubFile(name, size) for name, size in LLAMA_LIKE.items()]
    assert bytes_to_download(llama) == 2_400_000_000 + 877 + 189 + 296 + 9_000_000 + 54_000


def test_download_plan_reads_the_listing_once_at_the_commit(monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoSibling

    from calibft.pipeline.assets import DownloadPlan, download_plan

    calls = []

    def model_info(self, repo_id, revision, files_metadata=False, token=None):
        calls.append((repo_id, revision, files_metadata, token))
        siblings = [RepoSibling(rfilename=n, size=size) for n, size in LLAMA_LIKE.items()]
        return SimpleNamespace(sha="c" * 40, siblings=siblings)

    monkeypatch.setattr(HfApi, "model_info", model_info)
    plan = download_plan("meta-llama/Llama-3.2-1B-Instruct", "main", token="hf_x")
    expected = ("config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                "tokenizer.json", "tokenizer_config.json")  # fmt: skip
    total = 2_400_000_000 + 877 + 189 + 296 + 9_000_000 + 54_000
    assert plan == DownloadPlan("meta-llama/Llama-3.2-1B-Instruct", "c" * 40, expected, total)
    assert calls == [("meta-llama/Llama-3.2-1B-Instruct", "main", True, "hf_x")]


def test_download_plan_without_sizes_or_loadable_files(monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoSibling

    from calibft.pipeline.assets import download_plan

    listing = {}
    monkeypatch.setattr(
        HfApi,
        "model_info",
        lambda self, repo_id, revision, files_metadata, token: SimpleNamespace(
            sha="c" * 40, siblings=[RepoSibling(rfilename=n, size=size) for n, size in listing.items()]
        ),
    )
    listing.update({"config.json": None, "model.safetensors": 10, "README.md": 5})
    plan = download_plan("org/m", "c" * 40)  # the files still, their bytes unknown
    assert plan.files == ("config.json", "model.safetensors") and plan.total_bytes is None
    listing["config.json"] = 3
    assert download_plan("org/m", "c" * 40).total_bytes == 13
    listing.clear()
    listing.update({"README.md": 10, "original/consolidated.00.pth": 10})
    with pytest.raises(AssetError, match="holds no file that a from_pretrained load reads") as err:
        download_plan("org/m", "c" * 40)
    assert "original/consolidated.00.pth" in str(err.value)


def test_snapshot_downloads_and_verifies_only_the_planned_files(tmp_path, monkeypatch):
    from calibft.pipeline.assets import snapshot

    files = {
        "config.json": b"{}\n",
        "generation_config.json": b"{}\n",
        "model-00001-of-00002.safetensors": b"a" * 50,
        "model-00002-of-00002.safetensors": b"b" * 50,
        "model.safetensors.index.json": b"{}\n",
        "tokenizer.json": b"[]",
        "chat_template.jinja": b"{{ messages }}",
        "original/config.json": b"{}\n",
        "original/model--00001-of-00002.safetensors": b"c" * 70,
        "metal/model.bin": b"d" * 90,
        "README.md": b"# card\n",
    }
    downloads = _fake_hub(monkeypatch, {"sha": "c" * 40}, files)
    folder = tmp_path / "gpt-oss"
    assert snapshot("openai/gpt-oss-20b", "c" * 40, folder) == "c" * 40
    planned = ["chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json"]  # fmt: skip
    assert downloads == [("c" * 40, planned)]
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert [name for name in on_disk if not name.startswith(".cache/")] == planned


def test_a_snapshot_missing_a_planned_file_stops_the_rule(tmp_path, monkeypatch):
    import huggingface_hub

    from calibft.pipeline.assets import snapshot

    _fake_hub(monkeypatch, {"sha": "c" * 40}, SNAPSHOT_FILES)
    monkeypatch.setattr(  # a download that stopped short of the weights
        huggingface_hub,
        "snapshot_download",
        lambda repo_id, revision, local_dir, allow_patterns: _write_snapshot(
            local_dir, revision, {"config.json": b"{}\n"}
        ),
    )
    with pytest.raises(AssetError, match=r"lacks model\.safetensors") as err:
        snapshot("org/evaluator", "c" * 40, tmp_path / "m")
    assert "https://huggingface.co/org/evaluator" in str(err.value)


# ------------------------------------------------------------------------------------------------------------
# Content identities: git blob ids, the tinyBenchmarks pickle, and what a download at a commit holds


@pytest.mark.parametrize("content", [b"", b"{}\n", bytes(range(256)) * 5000])  # the last spans several chunks
def test_git_blob_id_is_what_git_hash_object_prints(tmp_path, content):
    path = tmp_path / "file"
    path.write_bytes(content)
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
    assert git_blob_id(path) == git.stdout.strip()


def test_the_tinybenchmarks_pickle_is_pinned_by_its_upstream_git_blob_id(tmp_path):
    assert TINYBENCHMARKS_PARAMS.git_blob == "eb2a0276bafbfc02dbf46c459a1142ff9baeb8a6"
    assert "/74577e0bd1921dd2adf489d3487a6e1ccbb08b82/" in TINYBENCHMARKS_PARAMS.url
    with pytest.raises(ValueError, match="git_blob must be 40 lowercase hex digits"):
        Asset("x", "http://example.invalid/x", None, "x.pkl", git_blob="EB2A")
    Asset("x", "http://example.invalid/x", None, "x.pkl", git_blob="0" * 40)  # an identity needs no check
    synthetic = gpirt.write_synthetic_params(tmp_path / "synthetic.pkl")
    mismatch = identity_mismatch(TINYBENCHMARKS_PARAMS, synthetic)
    assert mismatch == f"expected git blob id {TINYBENCHMARKS_PARAMS.git_blob}, got {git_blob_id(synthetic)}"


@pytest.fixture
def params_server(server, tmp_path):
    """The local server, also serving a synthetic parameters pickle and one that would run `touch MARKER`."""
    gpirt.write_synthetic_params(tmp_path / "served" / "synthetic.pkl")
    touching_pickle(tmp_path / "served" / "tampered.pkl", tmp_path / "MARKER")
    assert_plain_pickle_runs_it(tmp_path / "served" / "tampered.pkl", tmp_path / "MARKER")
    return server[0]


def _params_asset(url: str, blob_of: Path | None = None) -> Asset:
    """The tinyBenchmarks asset served from `url`; pinned to the git blob id of `blob_of` when given."""
    asset = dataclasses.replace(TINYBENCHMARKS_PARAMS, url=url)
    return asset if blob_of is None else dataclasses.replace(asset, git_blob=git_blob_id(blob_of))


def test_a_tampered_parameters_download_is_refused_unread_by_its_git_blob_id(params_server, tmp_path):
    url, cache = f"{params_server}/tampered.pkl", tmp_path / "cache"
    with pytest.raises(AssetError) as err:
        fetch(_params_asset(url), cache)
    got = git_blob_id(tmp_path / "served" / "tampered.pkl")
    assert f"expected git blob id {TINYBENCHMARKS_PARAMS.git_blob}, got {got}" in str(err.value)
    assert url in str(err.value) and "deleted unread" in str(err.value)
    assert not (tmp_path / "MARKER").exists() and _leftovers(cache) == []


def test_a_pickle_that_would_run_code_is_refused_even_with_its_own_git_blob_id(params_server, tmp_path):
    """The second line of defence: were the pinned id that of a tampered file, the check's restricted
    unpickler still refuses it, and nothing runs."""
    tampered = tmp_path / "served" / "tampered.pkl"
    with pytest.raises(AssetError, match=r"asks for posix\.system") as err:
        fetch(_params_asset(f"{params_server}/tampered.pkl", tampered), tmp_path / "cache")
    assert "tinyBenchmarks IRT parameters" in str(err.value)
    assert not (tmp_path / "MARKER").exists() and _leftovers(tmp_path / "cache") == []


def test_a_tampered_cached_copy_is_not_read_but_downloaded_again(params_server, tmp_path):
    served = tmp_path / "served" / "synthetic.pkl"
    asset = _params_asset(f"{params_server}/synthetic.pkl", served)
    (tmp_path / "cache").mkdir()
    touching_pickle(cache_path(asset, tmp_path / "cache"), tmp_path / "MARKER")  # "placed by hand"
    path = fetch(asset, tmp_path / "cache")
    assert path.read_bytes() == served.read_bytes() and not (tmp_path / "MARKER").exists()
    assert gpirt.load_params(path).keys() == {"lb", "mmlu"}


def test_fetch_asks_for_a_copy_by_hand_with_its_git_blob_id(params_server, tmp_path):
    with pytest.raises(AssetError, match="cannot download") as err:
        fetch(_params_asset(f"{params_server}/absent.pkl"), tmp_path / "cache")
    assert f"git blob id {TINYBENCHMARKS_PARAMS.git_blob}" in str(err.value) and "git hash-object" in str(err.value)


def _write_snapshot(folder, commit: str, files: dict[str, bytes] | None = None) -> Path:
    """A folder as `snapshot_download(local_dir=folder)` leaves it: each file and its download record (commit,
    ETag: the SHA-256 of an LFS file, the git blob id of a plain one, then the time)."""
    folder = Path(folder)
    files = SNAPSHOT_FILES if files is None else files
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
        etag = sha256_of(folder / name) if name.endswith(".safetensors") else git_blob_id(folder / name)
        record = folder / ".cache" / "huggingface" / "download" / f"{name}.metadata"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"{commit}\n{etag}\n1700000000.0\n")
    return folder


def test_a_snapshot_is_verified_file_by_file(tmp_path):
    files = {"config.json": b"{}\n", "model.safetensors": b"w" * 10, "sub/tokenizer.json": b"[]"}
    folder, source = _write_snapshot(tmp_path / "m", "c" * 40, files), "https://huggingface.co/org/m"
    assert verify_snapshot(folder, source, "c" * 40, files) == 3
    assert verify_snapshot(folder, source, "c" * 40, ["config.json"]) == 1  # only the files asked for
    with pytest.raises(AssetError) as err:  # a record of another commit
        verify_snapshot(folder, source, "d" * 40, files)
    assert f"expected commit {'d' * 40}, got {'c' * 40}" in str(err.value) and "org/m" in str(err.value)
    for name, kind, digest in [("model.safetensors", "sha256", sha256_of), ("config.json", "git blob id", git_blob_id)]:
        good = tmp_path / "good"
        (folder / name).rename(good)
        (folder / name).write_bytes(b"tampered")  # damaged content: both hashes, of the record's kind
        with pytest.raises(AssetError) as err:
            verify_snapshot(folder, source, "c" * 40, files)
        assert f"expected {kind} {digest(good)}, got {digest(folder / name)}" in str(err.value)
        good.replace(folder / name)
    (folder / "extra.bin").write_bytes(b"not downloaded")  # a stray file, not asked for: not looked at
    (folder / "original").mkdir()
    (folder / "original" / "consolidated.00.pth").write_bytes(b"another format")
    assert verify_snapshot(folder, source, "c" * 40, files) == 3
    with pytest.raises(AssetError, match="no readable download record"):  # asked for, without a record
        verify_snapshot(folder, source, "c" * 40, [*files, "extra.bin"])
    (folder / "model.safetensors").unlink()  # a selected file missing
    with pytest.raises(AssetError, match=r"lacks model\.safetensors") as err:
        verify_snapshot(folder, source, "c" * 40, files)
    assert str(folder / "model.safetensors") in str(err.value) and "delete" in str(err.value)
    with pytest.raises(AssetError, match="no files to verify"):
        verify_snapshot(folder, source, "c" * 40, [])


def test_a_snapshot_download_of_another_commit_stops_the_rule(tmp_path, monkeypatch):
    from calibft.pipeline.assets import snapshot

    # the hub serves files of another commit than the locked one
    _fake_hub(monkeypatch, {"sha": _Info.sha}, SNAPSHOT_FILES, served_commit="f" * 40)
    with pytest.raises(AssetError) as err:
        snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=tmp_path / "locks")
    assert f"expected commit {_Info.sha}, got {'f' * 40}" in str(err.value)
    assert "https://huggingface.co/org/evaluator" in str(err.value)


def test_a_dataset_read_at_another_commit_stops_the_export(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import HubDataset, export_dataset

    calls = []
    monkeypatch.setattr(datasets, "load_dataset_builder", _fake_builder(calls, resolved="f" * 40))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    out = tmp_path / "items.jsonl"
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("tinyBenchmarks/tinyMMLU", "test", "main"), out, lock_dir=tmp_path / "locks")
    assert f"expected commit {_Info.sha}, got {'f' * 40}" in str(err.value)
    assert "https://huggingface.co/datasets/tinyBenchmarks/tinyMMLU" in str(err.value) and not out.exists()
