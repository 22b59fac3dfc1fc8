"""Checkpoints of a job that a preemption may interrupt: a folder stamped with the job that wrote it, so that a
restarted job resumes from its own results only, and removed once the job's outputs are written. Evaluations keep
one file per prompt (`per_prompt`); training keeps its optimizer state there (`calibft.training.train`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from calibft.core.io import read_jsonl, write_json, write_jsonl


def folder_fingerprint(path: str | None) -> list | None:
    """(name, size, mtime in ns) of every file of a local folder; None for a Hugging Face id or nothing.

    A model rebuilt at the same path (the demo's tiny model) gets a new fingerprint, without reading weights.
    """
    if path is None or not Path(path).is_dir():
        return None
    files = sorted(f for f in Path(path).rglob("*") if f.is_file())
    return [[str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def checkpoint_folder(job) -> Path | None:
    """The job's checkpoint folder, emptied first when it holds the results of a different job: other settings,
    or another model or adapter at the same local path."""
    if job.checkpoint_dir is None:
        return None
    folder, stamp = Path(job.checkpoint_dir), {k: v for k, v in asdict(job).items() if k != "checkpoint_dir"}
    stamp["folders"] = {name: folder_fingerprint(getattr(job, name, None)) for name in ("model", "adapter")}
    stamped = folder / "job.json"
    if folder.exists() and (not stamped.exists() or json.loads(stamped.read_text()) != stamp):
        shutil.rmtree(folder)  # another job's, or of unknown origin
    write_json(folder / "job.json", stamp)
    return folder


def per_prompt(folder: Path | None, key: str, produce: Callable[[], Sequence[dict]]) -> list[dict]:
    """One prompt's records: read back from the checkpoint folder when an earlier attempt kept them, else
    produced and kept there (each prompt has its own seed, so both give the uninterrupted result)."""
    done = None if folder is None else folder / f"{key}.jsonl.gz"
    if done is not None and done.exists():
        return read_jsonl(done)
    records = list(produce())
    if done is not None:
        write_jsonl(done, records)
    return records


def finish_checkpoints(folder: Path | None) -> None:
    """Drop the checkpoints once the job's outputs are written."""
    if folder is not None:
        shutil.rmtree(folder)
