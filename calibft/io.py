"""Atomic output: every artifact is written to a temporary file (or folder) next to it, then renamed."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import numpy as np


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; results are shared like any file
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; once the block succeeds, it replaces `path` (a folder already
    there is moved aside first, then removed), so readers see the old folder or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".building", dir=path.parent))
    try:
        yield built
        os.chmod(built, 0o777 & ~_umask())  # mkdtemp makes the folder private; results are shared like any folder
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
        try:
            with suppress(FileNotFoundError):  # nothing there yet
                path.rename(old / "folder")
            built.rename(path)
        finally:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(built, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """One JSON object per line; gzip-compressed when the name ends in `.gz`, without file name or timestamp in
    the header, so that the same records give the same bytes."""
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        stream = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) if str(path).endswith(".gz") else raw
        with io.TextIOWrapper(stream, encoding="utf-8") as f:
            f.writelines(json.dumps(record) + "\n" for record in records)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: str | os.PathLike, obj: dict) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def read_runs(paths: Sequence[str | os.PathLike], runs: Sequence[Sequence[str]]) -> dict[str, dict[str, dict]]:
    """{model: {condition: the JSON file}} from files given in the order of `runs` ([model, condition] pairs)."""
    loaded: dict[str, dict[str, dict]] = {}
    for path, (model, condition) in zip(paths, runs, strict=True):
        loaded.setdefault(model, {})[condition] = json.loads(Path(path).read_text())
    return loaded


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray], metadata: dict[str, str | int]) -> None:
    """Arrays and scalar metadata (stored as `meta_<key>`) in one uncompressed `.npz`, atomically."""
    meta = {f"meta_{key}": np.array(value) for key, value in metadata.items()}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays, **meta)


def load_npz(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str | int]]:
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files if not name.startswith("meta_")}
        metadata = {name[5:]: data[name].item() for name in data.files if name.startswith("meta_")}
    return arrays, metadata


Job = TypeVar("Job")


def read_job(job_type: type[Job], command: str, argv: Sequence[str]) -> Job:
    """The job of `python -m {command} JOB`: a dataclass given as JSON text or as the path of a JSON file."""
    if len(argv) != 1:
        sys.exit(f"usage: python -m {command} JOB (a {job_type.__name__} as JSON text, or a JSON file)")
    text = argv[0] if argv[0].lstrip().startswith("{") else Path(argv[0]).read_text()
    return job_type(**json.loads(text))
