import dataclasses
import hashlib
import json
import socket
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


class _Builder:
    """What `export_dataset` uses of a `datasets` builder: the commit it resolved (`hash`) and the rows."""

    def __init__(self, commit, rows):
        self.hash, self._rows, self.prepared = commit, rows, False

    def download_and_prepare(self):
        self.prepared = True

    def as_dataset(self, split):
        import datasets

        assert self.prepared and split == "test"
        return datasets.Dataset.from_list(self._rows)


def _fake_builder(calls, rows=({"question": "1 + 1?", "answer": "2"},), resolved=None):
    """A stand-in for `datasets.load_dataset_builder` that records its calls; its builder reads commit `resolved`
    (default: the revision asked for)."""

    def fake(path, name, revision, token):
        calls.append((path, name, revision))
        return _Builder(resolved or revision, list(rows))

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

    def refused(path, name, revision, token):
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


def test_snapshot_downloads_the_locked_commit(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import snapshot

    upstream, downloads = {"sha": "c" * 40}, []

    class Info:
        def __init__(self):
            self.sha = upstream["sha"]

    def fake_download(repo, revision, local_dir):
        downloads.append(revision)
        _write_snapshot(local_dir, revision)

    monkeypatch.setattr(HfApi, "model_info", lambda self, repo_id, revision: Info())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    locks = tmp_path / "locks"
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    upstream["sha"] = "d" * 40
    assert snapshot("org/evaluator", "main", tmp_path / "m", lock_dir=locks) == "c" * 40
    assert snapshot("org/evaluator", "e" * 40, tmp_path / "m", lock_dir=locks) == "e" * 40  # a commit: as given
    assert snapshot("org/evaluator", "main", tmp_path / "m") == "d" * 40  # no lock_dir: the branch, as before
    assert downloads == ["c" * 40, "c" * 40, "e" * 40, "d" * 40]
    assert json.loads((locks / "models" / "org__evaluator.json").read_text())["commit"] == "c" * 40


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
    files = files or {"config.json": b"{}\n", "model.safetensors": b"weights" * 100}
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
    folder = _write_snapshot(tmp_path / "m", "c" * 40, files)
    assert verify_snapshot(folder, "https://huggingface.co/org/m", "c" * 40) == 3
    with pytest.raises(AssetError) as err:  # a record of another commit
        verify_snapshot(folder, "https://huggingface.co/org/m", "d" * 40)
    assert f"expected commit {'d' * 40}, got {'c' * 40}" in str(err.value) and "org/m" in str(err.value)
    for name, kind, digest in [("model.safetensors", "sha256", sha256_of), ("config.json", "git blob id", git_blob_id)]:
        good = tmp_path / "good"
        (folder / name).rename(good)
        (folder / name).write_bytes(b"tampered")  # damaged content: both hashes, of the record's kind
        with pytest.raises(AssetError) as err:
            verify_snapshot(folder, "https://huggingface.co/org/m", "c" * 40)
        assert f"expected {kind} {digest(good)}, got {digest(folder / name)}" in str(err.value)
        good.replace(folder / name)
    (folder / "extra.bin").write_bytes(b"not downloaded")  # a file without a record cannot be verified
    with pytest.raises(AssetError, match="no readable download record"):
        verify_snapshot(folder, "https://huggingface.co/org/m", "c" * 40)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AssetError, match="holds no files"):
        verify_snapshot(tmp_path / "empty", "https://huggingface.co/org/m", "c" * 40)


def test_a_snapshot_download_of_another_commit_stops_the_rule(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import HfApi

    from calibft.pipeline.assets import snapshot

    monkeypatch.setattr(HfApi, "model_info", lambda self, repo_id, revision: _Info())
    monkeypatch.setattr(  # the hub serves files of another commit than the locked one
        huggingface_hub, "snapshot_download", lambda repo, revision, local_dir: _write_snapshot(local_dir, "f" * 40)
    )
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
