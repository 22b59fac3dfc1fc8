"""Atomic output: every artifact is written to a temporary file (or folder) next to it, then renamed."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import numpy as np

# What a write raises when the disk (or the user's quota) is full.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def _full_disk_named(path: Path) -> Iterator[None]:
    """A full disk in the block (ENOSPC, EDQUOT) raised again as an OSError saying where and what to do; the
    callers leave `path` as it was."""
    try:
        yield
    except OSError as err:
        if err.errno not in _DISK_FULL:
            raise
        raise OSError(
            err.errno,
            f"the disk is full: no space left in {path.parent} while writing {path} ({err.strerror or err}). Free "
            f"space there (or move results/ to a larger disk) and rerun; {path} was left as it was, and the "
            "partial file was removed",
            str(path),
        ) from err


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto `path` only if the block succeeds.

    If the block fails, `path` keeps its previous content and the temporary file is removed; a full disk is
    reported as an OSError naming the file and its folder.
    """
    path = Path(path)
    tmp = None
    try:
        with _full_disk_named(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            yield Path(tmp)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; results are shared like any file
            os.replace(tmp, path)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; once the block succeeds, it replaces `path` (a folder already
    there is moved aside first, then removed), so readers see the old folder or the new one, never a part."""
    path = Path(path)
    built = None
    try:
        with _full_disk_named(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            built = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".building", dir=path.parent))
            yield built
            os.chmod(built, 0o777 & ~_umask())  # mkdtemp makes the folder private; results are shared
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            try:
                with suppress(FileNotFoundError):  # nothing there yet
                    path.rename(old / "folder")
                built.rename(path)
            finally:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if built is not None:
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


def remake(path: str | os.PathLike) -> str:
    """What to do about a damaged file: the fix part of a loader's error."""
    return (
        f"if the workflow made it, delete it and rerun the rule that makes it (snakemake --cores 1 {path}); "
        "if you wrote it, fix or replace it"
    )


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The JSON objects of a JSON Lines file (gzip-compressed when named `.gz`), blank lines skipped.

    Raises ValueError naming the file, the line and the fix when a line is not a JSON object, or when a `.gz`
    file is not gzip or was cut short (an interrupted copy or a full disk).
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    records, number = [], 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}, line {number}: not JSON ({err}); {remake(path)}") from err
                if not isinstance(record, dict):
                    raise ValueError(
                        f"{path}, line {number}: a JSON {type(record).__name__}, not an object; {remake(path)}"
                    )
                records.append(record)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(
            f"{path} is not a complete gzip file (after line {number}: {err}), cut short or damaged; {remake(path)}"
        ) from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}, line {number + 1}: not UTF-8 text ({err}); {remake(path)}") from err
    return records


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


def load_npz(
    path: str | os.PathLike, required: Sequence[str] = ()
) -> tuple[dict[str, np.ndarray], dict[str, str | int]]:
    """The arrays and metadata that `save_npz` wrote; ValueError naming the file and the fix when it is cut short,
    damaged, not an `.npz`, or lacks one of the `required` arrays."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            arrays = {name: data[name] for name in data.files if not name.startswith("meta_")}
            metadata = {name[5:]: data[name].item() for name in data.files if name.startswith("meta_")}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError) as err:
        if isinstance(err, OSError) and not isinstance(err, zipfile.BadZipFile) and err.errno is not None:
            raise  # not there, or not readable: the OS's message names the file
        reason = "it is empty" if isinstance(err, EOFError) else str(err)
        if "pickled" in reason:  # neither a zip archive nor an .npy header: numpy took it for a pickle
            reason = "not a zip archive"
        raise ValueError(
            f"{path} is not a readable .npz file ({reason}): cut short or damaged; {remake(path)}"
        ) from err
    missing = [name for name in required if name not in arrays]
    if missing:
        raise ValueError(
            f"{path} lacks the arrays {', '.join(missing)}: it was made by another version; {remake(path)}"
        )
    return arrays, metadata


Job = TypeVar("Job")


def read_job(job_type: type[Job], command: str, argv: Sequence[str]) -> Job:
    """The job of `python -m {command} JOB`: a dataclass given as JSON text or as the path of a JSON file."""
    if len(argv) != 1:
        sys.exit(f"usage: python -m {command} JOB (a {job_type.__name__} as JSON text, or a JSON file)")
    text = argv[0] if argv[0].lstrip().startswith("{") else Path(argv[0]).read_text()
    return job_type(**json.loads(text))
