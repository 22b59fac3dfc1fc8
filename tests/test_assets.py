import hashlib
import json
import socket
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from calibft.assets import (
    NOVELTYBENCH_COMMIT,
    NOVELTYBENCH_PROMPTS,
    OPEN_ENDED_PROMPTS,
    Asset,
    AssetError,
    cache_path,
    fetch,
    jsonl_prompts,
    sha256_of,
)

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


def test_noveltybench_prompts_are_pinned_to_the_authors_commit(tmp_path):
    with pytest.raises(ValueError, match="content check"):
        Asset("x", "http://example.invalid/x", None, "x.jsonl")
    assert NOVELTYBENCH_COMMIT == "984876e92a5eefe6945f273b8c8543a4e6cff070"
    (tmp_path / "two.jsonl").write_bytes(JSONL)
    for split, count in [("curated", 100), ("wildchat", 1000)]:
        asset = NOVELTYBENCH_PROMPTS[split]
        assert f"/novelty-bench/novelty-bench/{NOVELTYBENCH_COMMIT}/data/" in asset.url
        with pytest.raises(ValueError, match=f"2 prompts, expected {count}"):
            asset.check(tmp_path / "two.jsonl")


class _Info:
    sha = "0123456789abcdef0123456789abcdef01234567"


def test_export_dataset_writes_rows_in_order_at_the_resolved_commit(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import HfApi

    from calibft.assets import HubDataset, export_dataset

    calls = []

    def fake_load(path, name, split, revision, token):
        calls.append((path, name, split, revision))
        return datasets.Dataset.from_list([{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    out = tmp_path / "items.jsonl"
    commit = export_dataset(HubDataset("tinyBenchmarks/tinyGSM8k", "test", "main", name="main"), out)
    assert commit == _Info.sha and calls == [("tinyBenchmarks/tinyGSM8k", "main", "test", _Info.sha)]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"question": "1 + 1?", "answer": "2"}, {"question": "Été?", "answer": "3"}]


def test_a_gated_dataset_without_a_token_names_the_terms_to_accept(tmp_path, monkeypatch):
    from calibft.assets import HubDataset, export_dataset

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

    from calibft.assets import HubDataset, export_dataset

    def refused(path, name, split, revision, token):
        try:
            raise GatedRepoError("403 Client Error: access to this dataset is restricted", response=_Refusal())
        except GatedRepoError as err:
            raise DatasetNotFoundError(f"Dataset '{path}' is a gated dataset on the Hub.") from err

    monkeypatch.setenv("HF_TOKEN", "hf_without_access")
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    monkeypatch.setattr(datasets, "load_dataset", refused)
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("allenai/paloma", "test", "main", name="ptb", gated=True), tmp_path / "ptb.jsonl")
    message = str(err.value)
    assert "this token has no access" in message and "https://huggingface.co/datasets/allenai/paloma" in message
    assert not (tmp_path / "ptb.jsonl").exists()


def test_an_unreachable_hub_says_how_to_export_the_dataset_elsewhere(tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    from calibft.assets import HubDataset, export_dataset

    def offline(self, path, revision, token):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "dataset_info", offline)
    out = tmp_path / "mmlu.jsonl"
    with pytest.raises(AssetError) as err:
        export_dataset(HubDataset("tinyBenchmarks/tinyMMLU", "test", "main"), out)
    message = str(err.value)
    assert "tinyBenchmarks/tinyMMLU" in message and str(out.resolve()) in message and "to_json" in message
    assert not out.exists()


def _fake_rows(calls):
    import datasets

    def fake_load(path, name, split, revision, token):
        calls.append(revision)
        return datasets.Dataset.from_list([{"question": "1 + 1?", "answer": "2"}])

    return fake_load


def test_export_dataset_locks_the_branch_and_keeps_its_commit_when_it_moves(tmp_path, monkeypatch, caplog):
    import logging

    import datasets
    from huggingface_hub import HfApi

    from calibft.assets import HubDataset, export_dataset

    upstream, downloads = {"sha": "a" * 40}, []

    class Info:
        def __init__(self):
            self.sha = upstream["sha"]

    monkeypatch.setattr(datasets, "load_dataset", _fake_rows(downloads))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: Info())
    locks, dataset = tmp_path / "locks", HubDataset("tinyBenchmarks/tinyMMLU", "test", "main")
    lock = locks / "datasets" / "tinyBenchmarks__tinyMMLU.json"
    with caplog.at_level(logging.INFO, logger="calibft"):
        assert export_dataset(dataset, tmp_path / "a.jsonl", lock_dir=locks) == "a" * 40
        assert json.loads(lock.read_text())["commit"] == "a" * 40 and f"locked to commit {'a' * 40}" in caplog.text
        upstream["sha"] = "b" * 40  # the branch moves: the locked commit is downloaded, with a warning
        caplog.clear()
        assert export_dataset(dataset, tmp_path / "b.jsonl", lock_dir=locks) == "a" * 40
    assert downloads == ["a" * 40, "a" * 40]
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

    from calibft.assets import HubDataset, export_dataset
    from calibft.locks import LockError

    downloads = []
    monkeypatch.setattr(datasets, "load_dataset", _fake_rows(downloads))
    monkeypatch.setattr(HfApi, "dataset_info", lambda self, path, revision, token: _Info())
    lock = tmp_path / "locks" / "datasets" / "allenai__paloma.json"
    lock.parent.mkdir(parents=True)
    lock.write_text("{")
    with pytest.raises(LockError, match="corrupt") as err:
        export_dataset(
            HubDataset("allenai/paloma", "test", "main", name="ptb"), tmp_path / "p.jsonl", tmp_path / "locks"
        )
    assert str(lock) in str(err.value) and downloads == [] and not (tmp_path / "p.jsonl").exists()


def test_snapshot_downloads_the_locked_commit(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import HfApi

    from calibft.assets import snapshot

    upstream, downloads = {"sha": "c" * 40}, []

    class Info:
        def __init__(self):
            self.sha = upstream["sha"]

    monkeypatch.setattr(HfApi, "model_info", lambda self, repo_id, revision: Info())
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo, revision, local_dir: downloads.append(revision)
    )
    locks = tmp_path / "locks"
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    upstream["sha"] = "d" * 40
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    assert snapshot("org/evaluator", "e" * 40, tmp_path / "m", lock_dir=locks) == "e" * 40  # a commit: as given
    assert snapshot("org/evaluator", "main", tmp_path / "m") == "d" * 40  # no lock_dir: the branch, as before
    assert downloads == ["c" * 40, "c" * 40, "e" * 40, "d" * 40]
    assert json.loads((locks / "models" / "org__evaluator.json").read_text())["commit"] == "c" * 40
