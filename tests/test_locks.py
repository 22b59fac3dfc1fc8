import json
import threading

import pytest

from calibft.pipeline.locks import LockError, is_commit, lock_path, locked_revision, read_lock, write_lock

A = "a" * 40
B = "b" * 40


class FakeHub:
    """A resolver: the commit each branch points to now, with the calls it got; `offline` makes it fail."""

    def __init__(self, **branches: str):
        self.branches, self.calls, self.offline = branches, [], False

    def __call__(self, revision: str) -> str:
        self.calls.append(revision)
        if self.offline:
            raise ConnectionError("[Errno -2] Name or service not known")
        return self.branches[revision]


def test_the_first_download_locks_the_commit(tmp_path):
    hub = FakeHub(main=A)
    commit, message, warning = locked_revision("datasets", "tinyBenchmarks/tinyMMLU", "main", tmp_path, hub)
    path = tmp_path / "datasets" / "tinyBenchmarks__tinyMMLU.json"
    assert (commit, warning, hub.calls) == (A, False, ["main"])
    assert lock_path("datasets", "tinyBenchmarks/tinyMMLU", tmp_path) == path
    lock = json.loads(path.read_text())
    assert {k: lock[k] for k in ("repo_id", "kind", "requested_revision", "commit")} == {
        "repo_id": "tinyBenchmarks/tinyMMLU",
        "kind": "datasets",
        "requested_revision": "main",
        "commit": A,
    }
    assert lock["locked_at"].endswith("+00:00")  # UTC
    assert str(path) in message and A in message and "delete" in message
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left


def test_later_downloads_take_the_locked_commit_and_only_compare(tmp_path):
    hub = FakeHub(main=A)
    locked_revision("models", "org/evaluator", "main", tmp_path, hub)
    before = (tmp_path / "models" / "org__evaluator.json").read_text()
    again = locked_revision("models", "org/evaluator", "main", tmp_path, hub)
    assert again.commit == A and not again.warning and "still there upstream" in again.message
    assert hub.calls == ["main", "main"]
    assert (tmp_path / "models" / "org__evaluator.json").read_text() == before  # not rewritten


def test_a_branch_that_moved_upstream_is_reported_and_the_lock_kept(tmp_path):
    hub = FakeHub(main=A)
    locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub)
    hub.branches["main"] = B
    result = locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub)
    path = tmp_path / "datasets" / "allenai__paloma.json"
    assert result.commit == A and result.warning
    assert A in result.message and B in result.message and f"delete {path}" in result.message
    assert read_lock(path)["commit"] == A
    path.unlink()  # what the message says to do: the next download takes the new commit
    assert locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub).commit == B


def test_offline_the_lock_is_used_and_the_check_reported_impossible(tmp_path):
    hub = FakeHub(main=A)
    locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub)
    hub.offline = True
    result = locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub)
    assert result.commit == A and not result.warning
    assert "could not check" in result.message and "ConnectionError" in result.message


def test_without_a_lock_the_resolvers_error_propagates(tmp_path):
    hub = FakeHub(main=A)
    hub.offline = True
    with pytest.raises(ConnectionError):
        locked_revision("datasets", "allenai/paloma", "main", tmp_path, hub)
    assert not (tmp_path / "datasets").exists() or not any((tmp_path / "datasets").iterdir())


def test_a_commit_needs_no_lock_and_no_lock_dir_none(tmp_path):
    hub = FakeHub(main=A)
    assert locked_revision("models", "org/m", B, tmp_path, hub) == (B, None, False)
    assert hub.calls == [] and not any(tmp_path.iterdir())
    assert locked_revision("models", "org/m", "main", None, hub) == (A, None, False)
    assert not any(tmp_path.iterdir())
    assert is_commit(B) and is_commit(B.upper()) and not is_commit("main") and not is_commit("a" * 39)


@pytest.mark.parametrize(
    "content",
    ["{not json", "[]", json.dumps({"repo_id": "org/m", "kind": "models"}), "COMMIT", "OTHER_REPO"],
)
def test_a_corrupt_lock_names_the_file_and_the_fix(tmp_path, content):
    good = {"repo_id": "org/m", "kind": "models", "requested_revision": "main", "commit": A, "locked_at": "x"}
    if content == "COMMIT":
        content = json.dumps({**good, "commit": "main"})
    elif content == "OTHER_REPO":
        content = json.dumps({**good, "repo_id": "org/other"})
    path = lock_path("models", "org/m", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    hub = FakeHub(main=A)
    with pytest.raises(LockError) as err:
        locked_revision("models", "org/m", "main", tmp_path, hub)
    message = str(err.value)
    assert str(path) in message and "corrupt" in message and "Delete it" in message
    assert path.read_text() == content  # left for the user to look at


def test_another_requested_revision_replaces_the_lock(tmp_path):
    hub = FakeHub(main=A, v2=B)
    locked_revision("models", "org/m", "main", tmp_path, hub)
    result = locked_revision("models", "org/m", "v2", tmp_path, hub)
    assert result.commit == B and "replacing its lock of revision 'main'" in result.message
    assert read_lock(lock_path("models", "org/m", tmp_path))["requested_revision"] == "v2"


def test_the_first_writer_wins(tmp_path):
    path, _ = write_lock("datasets", "allenai/paloma", "main", A, tmp_path)
    again, kept = write_lock("datasets", "allenai/paloma", "main", B, tmp_path)
    assert again == path and kept["commit"] == A == read_lock(path)["commit"]

    # parallel first downloads (the PALOMA slices) all take one commit, whatever each resolved
    results, barrier = [], threading.Barrier(8)

    def download(i):
        barrier.wait()
        results.append(locked_revision("datasets", "org/d", "main", tmp_path, lambda rev: f"{i:x}" * 40).commit)

    threads = [threading.Thread(target=download, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and read_lock(lock_path("datasets", "org/d", tmp_path))["commit"] == results[0]


def test_lock_paths_reject_odd_ids_and_kinds(tmp_path):
    with pytest.raises(ValueError, match="kind"):
        lock_path("spaces", "org/m", tmp_path)
    for bad in ("", "org/../m", "/abs"):
        with pytest.raises(ValueError, match="repository id"):
            lock_path("models", bad, tmp_path)
    with pytest.raises(ValueError, match="commit"):
        write_lock("models", "org/m", "main", "main", tmp_path)
