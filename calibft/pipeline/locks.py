"""Lock files: the commit a branch pointed to when something pinned only to that branch was first downloaded.

The config pins the tinyBenchmarks datasets, the PALOMA slices and the NoveltyBench evaluators to a revision
that may be a branch (`main`). A branch moves; a commit does not. The first download of a branch-pinned
repository therefore writes the commit it resolved to a lock file, one per repository:
`{lock_dir}/{kind}/{owner}__{name}.json` (kind `datasets` or `models`), with the repository, the requested
revision, the commit and when it was locked. Every later download takes the locked commit instead of the
branch, and compares it with the branch's current commit: when the branch has moved, it says so (and how to
take the new commit: delete the lock file) rather than silently downloading something else. Without network
access the comparison is skipped, with a note. A revision that is already a commit needs no lock.

The hub is not called here: `locked_revision` takes a `resolve` function (branch -> commit), so that the
logic runs offline in the tests. The first writer of a lock wins (the lock is created exclusively, through a
complete temporary file, so that a reader never sees a partial one): parallel downloads of one repository
(the PALOMA slices) all take the same commit.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from calibft.core.io import atomic_path

KINDS = ("datasets", "models")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_FIELDS = ("repo_id", "kind", "requested_revision", "commit", "locked_at")


class LockError(RuntimeError):
    """A lock file that cannot be used: unreadable, or not a lock of the repository it is named after."""


class LockedRevision(NamedTuple):
    """What to download: the commit, a message for the job's log (None when nothing was locked or looked up),
    and whether that message is a warning (the branch moved upstream since it was locked)."""

    commit: str
    message: str | None
    warning: bool = False

    @property
    def level(self) -> int:
        return logging.WARNING if self.warning else logging.INFO


def is_commit(revision: str) -> bool:
    """Whether `revision` is a full commit hash (40 hex digits), which needs no lock."""
    return bool(_COMMIT.fullmatch(revision.lower()))


def lock_path(kind: str, repo_id: str, lock_dir: str | os.PathLike) -> Path:
    """The lock file of one repository: `{lock_dir}/{kind}/{owner}__{name}.json`."""
    if kind not in KINDS:
        raise ValueError(f"lock kind must be one of {KINDS}, got {kind!r}")
    parts = repo_id.split("/")
    if not repo_id or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"not a Hugging Face repository id: {repo_id!r}")
    return Path(lock_dir) / kind / ("__".join(parts) + ".json")


def read_lock(path: str | os.PathLike, kind: str | None = None, repo_id: str | None = None) -> dict | None:
    """The lock at `path` (None when there is none); `LockError`, naming the file and the fix, when it cannot be
    used: not JSON, fields missing, no commit hash, or the lock of another repository or kind."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LockError(f"cannot read the lock file {path}: {err}") from err
    try:
        lock = json.loads(text)
        if not isinstance(lock, dict):
            raise ValueError("not a JSON object")
        missing = [name for name in _FIELDS if not isinstance(lock.get(name), str)]
        if missing:
            raise ValueError(f"missing or non-string field(s) {', '.join(missing)}")
        if not is_commit(lock["commit"]):
            raise ValueError(f"commit {lock['commit']!r} is not a 40-hex-digit commit hash")
        for name, expected in (("repo_id", repo_id), ("kind", kind)):
            if expected is not None and lock[name] != expected:
                raise ValueError(f"it locks {name} {lock[name]!r}, not {expected!r}")
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise LockError(
            f"the lock file {path} is corrupt ({err}). Delete it to lock the revision's current upstream commit "
            "again on the next download, or restore it (e.g. from version control) to keep the commit it held"
        ) from err
    return lock


def write_lock(
    kind: str, repo_id: str, requested: str, commit: str, lock_dir: str | os.PathLike, *, replace: bool = False
) -> tuple[Path, dict]:
    """Lock `repo_id` at `requested` to `commit`; returns (the lock file, the lock in force).

    Written to a complete temporary file first, then put in place atomically. Unless `replace`, an existing
    lock (another job's, written in the meantime) is kept and returned instead: the first writer wins.
    """
    if not is_commit(commit):
        raise ValueError(f"{repo_id}: {commit!r} is not a commit hash")
    path = lock_path(kind, repo_id, lock_dir)
    lock = {
        "repo_id": repo_id,
        "kind": kind,
        "requested_revision": requested,
        "commit": commit.lower(),
        "locked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "note": f"downloads of {repo_id} at {requested!r} take this commit; delete this file to take the newest one",
    }
    if replace:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(lock, indent=2) + "\n", encoding="utf-8")
        return path, lock
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(lock, indent=2) + "\n")
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # atomic, and fails where a lock exists: the first writer wins
        except FileExistsError:
            return path, read_lock(path, kind, repo_id)
    finally:
        os.unlink(tmp)
    return path, lock


def locked_revision(
    kind: str,
    repo_id: str,
    requested: str,
    lock_dir: str | os.PathLike | None,
    resolve: Callable[[str], str],
) -> LockedRevision:
    """The commit to download `repo_id` at `requested`, and what to log about it.

    - `requested` is a commit, or `lock_dir` is None: `resolve(requested)` (no lock read or written).
    - No lock yet (or a lock of another requested revision): `resolve(requested)`, written to the lock file.
      `resolve`'s errors propagate: nothing can be downloaded without the commit.
    - A lock: its commit. `resolve(requested)` is called only to compare: a branch that moved upstream gives a
      warning (the locked commit, the upstream one, and how to take it); a failed call a note that the check
      was not possible.

    Raises `LockError` for a lock file that cannot be used.
    """
    if is_commit(requested):
        return LockedRevision(requested, None)
    if lock_dir is None:
        return LockedRevision(resolve(requested), None)
    path = lock_path(kind, repo_id, lock_dir)
    lock = read_lock(path, kind, repo_id)
    if lock is None or lock["requested_revision"] != requested:
        commit = resolve(requested)
        if lock is None:
            path, lock = write_lock(kind, repo_id, requested, commit, lock_dir)
            was = ""
        else:
            was = f" (replacing its lock of revision {lock['requested_revision']!r} at commit {lock['commit']})"
            path, lock = write_lock(kind, repo_id, requested, commit, lock_dir, replace=True)
        return LockedRevision(
            lock["commit"],
            f"{repo_id}: revision {requested!r} locked to commit {lock['commit']} in {path}{was}; later downloads "
            "take this commit (delete the lock file to take the branch's newest one)",
        )
    commit = lock["commit"]
    locked = f"commit {commit}, locked in {path} on {lock['locked_at']}"
    try:
        upstream = resolve(requested)
    except Exception as err:  # offline, hub down, rate limit: the lock still says what to download
        return LockedRevision(
            commit,
            f"{repo_id}: using {locked}; could not check whether revision {requested!r} moved upstream "
            f"({_root_cause(err)})",
        )
    if upstream.lower() == commit:
        return LockedRevision(commit, f"{repo_id}: using {locked} (revision {requested!r} is still there upstream)")
    return LockedRevision(
        commit,
        f"{repo_id}: revision {requested!r} has moved upstream to commit {upstream}; downloading the locked "
        f"{locked}, as before. To take the new commit, delete {path} and download again (remove the outputs "
        "made from it, or run snakemake with --forcerun for their rules)",
        warning=True,
    )


def _root_cause(err: BaseException) -> str:
    """The innermost exception `err` was raised from, as `Type: message` (the hub's wrappers add only advice)."""
    seen = set()
    while err.__cause__ is not None and id(err.__cause__) not in seen:
        seen.add(id(err))
        err = err.__cause__
    return f"{type(err).__name__}: {err}"
