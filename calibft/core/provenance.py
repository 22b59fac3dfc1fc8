"""Provenance: what produced a job's outputs, in one `provenance.json` beside them.

`provenance(job)` records, for any job dataclass (training, sampling evaluations, NoveltyBench scoring; the
fields that a job lacks are skipped):

- the job itself and the protocol switches in force (`job.protocol`), and the effective generation settings
  the caller passes (None for a job that does not generate);
- every model, tokenizer, adapter and evaluator the job names, as resolved: a local folder by its path, its
  files' (name, size, mtime) and the SHA-256 of its small files (configs, tokenizer files; never the weights),
  plus the commit it was downloaded at where `hf download --local-dir` left that behind; a Hugging Face id by
  the commit that was loaded: given by the caller (`revisions`), recorded on the loaded object (`_commit_hash`
  of transformers < 5), or else the commit the local Hugging Face cache maps the default branch to;
- the dataset locks under `resources/locks/` (calibft.pipeline.locks) and the SHA-256 of the input files the caller
  passes;
- the versions of Python and the packages that compute (None for one not installed), the pipeline's git commit
  and whether its work tree has changes (None outside a git checkout), the seeds, the CPU kernel pins
  (calibft.core.cpu), the host and the UTC time.

Nothing here loads a model or contacts the network; the hashing reads small files only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from calibft.core.io import write_json

FILENAME = "provenance.json"
PACKAGES = ("calibft", "torch", "transformers", "peft", "accelerate", "numpy", "scipy", "datasets", "tokenizers")
# The job fields that name a model, tokenizer, adapter or evaluator (a Hugging Face id or a local folder).
MODEL_FIELDS = ("model", "tokenizer", "adapter", "classifier", "classifier_tokenizer", "reward_model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".npz")
SMALL_FILE = 64 << 20  # files above this size are listed, not hashed (a tokenizer.json is up to ~35 MB)
DEFAULT_LOCK_DIR = "resources/locks"
_MAX_CHANGES = 200


def provenance(
    job,
    *,
    generation: dict | None = None,
    extra: dict | None = None,
    model=None,
    tokenizer=None,
    loaded: dict | None = None,
    revisions: dict[str, str] | None = None,
    inputs: dict[str, str | os.PathLike] | None = None,
    seeds: dict | None = None,
    lock_dir: str | os.PathLike | None = DEFAULT_LOCK_DIR,
) -> dict:
    """The provenance record of `job` (any dataclass; missing fields are skipped), JSON-serializable.

    - `generation`: the effective generation settings (e.g. the GenerationConfig's dict as passed to
      `generate`); None when the job does not generate.
    - `model`, `tokenizer`, `loaded`: the loaded objects, by job field (`loaded={"reward_model": ...}`); their
      recorded commit is taken where transformers left one.
    - `revisions`: the commit each job field was loaded at, by field, where the caller knows it.
    - `inputs`: name -> input file, recorded with its SHA-256 (a folder with its listing).
    - `seeds`: per-evaluation seeds, beside `job.seed`.
    - `lock_dir`: where the download locks are (None: none recorded).
    - `extra`: anything else, recorded as given.
    """
    loaded = {**({"model": model} if model is not None else {}), **(loaded or {})}
    if tokenizer is not None:
        loaded.setdefault("tokenizer", tokenizer)
    revisions = revisions or {}
    record = {
        "job_type": f"{type(job).__module__}.{type(job).__qualname__}",
        "job": _job_fields(job),
        "protocol": getattr(job, "protocol", None),
        "generation": generation,
        "models": {
            name: _model_source(getattr(job, name), loaded.get(name), revisions.get(name))
            for name in MODEL_FIELDS
            if isinstance(getattr(job, name, None), str | os.PathLike)
        },
        "datasets": {
            "locks": dataset_locks(lock_dir),
            "inputs": {name: _input(path) for name, path in (inputs or {}).items()},
        },
        "seeds": {"job": getattr(job, "seed", None), **(seeds or {})},
        "packages": package_versions(),
        "pipeline": git_state(),
        "cpu": cpu_pins(),
        "host": socket.gethostname(),
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "extra": extra,
    }
    return json.loads(json.dumps(record, default=_jsonable))  # plain JSON types, checked now rather than on write


def write_provenance(out_dir: str | os.PathLike, job, **kw) -> Path:
    """Write `provenance(job, **kw)` to `{out_dir}/provenance.json`, atomically (no partial file on error)."""
    path = Path(out_dir) / FILENAME
    write_json(path, provenance(job, **kw))
    return path


def _job_fields(job) -> dict | None:
    if dataclasses.is_dataclass(job) and not isinstance(job, type):
        return dataclasses.asdict(job)
    return dict(vars(job)) if hasattr(job, "__dict__") else None


def _jsonable(value):
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if hasattr(value, "to_dict"):  # a GenerationConfig, for example
        return value.to_dict()
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    return str(value)


# --- models -------------------------------------------------------------------------------------------------


def _model_source(source, obj, revision: str | None) -> dict:
    """One model, tokenizer, adapter or evaluator: a local folder or a Hugging Face id, as resolved."""
    source = os.fspath(source)
    if Path(source).exists():
        return {"source": source, **folder_record(source)}
    record = {"source": source, "hub_id": source, "commit": None, "commit_from": None}
    for commit, origin in (
        (revision, "caller"),
        (loaded_commit(obj), "loaded object"),
        (_cached_commit(source), "huggingface cache refs/main"),
    ):
        if commit:
            record.update(commit=str(commit), commit_from=origin)
            break
    if obj is not None and getattr(obj, "name_or_path", None):
        record["loaded_name_or_path"] = str(obj.name_or_path)
    return record


def loaded_commit(obj) -> str | None:
    """The commit transformers recorded on a loaded model, config or tokenizer (transformers < 5 keeps it as
    `config._commit_hash` and `init_kwargs["_commit_hash"]`; later versions record none)."""
    if obj is None:
        return None
    candidates = [getattr(obj, "_commit_hash", None), getattr(getattr(obj, "config", None), "_commit_hash", None)]
    init_kwargs = getattr(obj, "init_kwargs", None)
    if isinstance(init_kwargs, dict):
        candidates.append(init_kwargs.get("_commit_hash"))
    return next((str(c) for c in candidates if isinstance(c, str) and c), None)


def _cached_commit(repo_id: str) -> str | None:
    """The commit the Hugging Face cache maps `main` to: what a load by this id took last, online or offline."""
    try:
        from huggingface_hub import constants

        folder = Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))
        ref = folder / "refs" / constants.DEFAULT_REVISION
        if not ref.is_file():
            return None
        return ref.read_text().strip() or None
    except Exception:  # no hub client, or an id that is no path: nothing recorded
        return None


def folder_record(path: str | os.PathLike) -> dict:
    """A local folder or file: its absolute path, its files (name, size, mtime in ns), the SHA-256 of each small
    file that is not weights, and the commit `hf download --local-dir` recorded in it."""
    path = Path(path)
    if path.is_file():
        return {"path": str(path.resolve()), "kind": "file", "sha256": _sha256(path)}
    files = sorted(f for f in path.rglob("*") if f.is_file())
    listing, hashes = [], {}
    for f in files:
        rel, stat = f.relative_to(path).as_posix(), f.stat()
        listing.append([rel, stat.st_size, stat.st_mtime_ns])
        if rel.startswith(".cache/") or f.suffix.lower() in WEIGHT_SUFFIXES or stat.st_size > SMALL_FILE:
            continue
        hashes[rel] = _sha256(f)
    return {
        "path": str(path.resolve()),
        "kind": "folder",
        "files": listing,
        "sha256": hashes,
        "downloaded_commit": _local_dir_commit(path),
    }


def _local_dir_commit(path: Path) -> str | list[str] | None:
    """The commit(s) in the download metadata that huggingface_hub keeps in a `--local-dir` folder."""
    commits = set()
    for meta in (path / ".cache" / "huggingface" / "download").rglob("*.metadata"):
        try:
            first = meta.read_text().splitlines()[0].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if first:
            commits.add(first)
    if not commits:
        return None
    return commits.pop() if len(commits) == 1 else sorted(commits)


# --- data ---------------------------------------------------------------------------------------------------


def dataset_locks(lock_dir: str | os.PathLike | None) -> dict:
    """The lock files under `lock_dir` (calibft.pipeline.locks), by path relative to it; an unreadable one as its
    error."""
    if lock_dir is None or not Path(lock_dir).is_dir():
        return {}
    locks = {}
    for path in sorted(Path(lock_dir).rglob("*.json")):
        try:
            locks[path.relative_to(lock_dir).as_posix()] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            locks[path.relative_to(lock_dir).as_posix()] = {"error": f"{type(err).__name__}: {err}"}
    return locks


def _input(path) -> dict:
    path = Path(path)
    if not path.exists():
        return {"path": str(path), "missing": True}
    if path.is_file():
        return {"path": str(path.resolve()), "sha256": _sha256(path), "size": path.stat().st_size}
    return folder_record(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- software and machine -----------------------------------------------------------------------------------


def package_versions() -> dict[str, str | None]:
    """Python's version and each package's in PACKAGES (None when it is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(package_dir: str | os.PathLike | None = None) -> dict | None:
    """The commit of the git checkout that holds calibft, and whether its work tree has changes (with the
    changed paths, as `git status --porcelain` lists them, and the SHA-256 of `git diff HEAD`); None outside a
    checkout or without git."""
    package_dir = Path(package_dir or Path(__file__).resolve().parents[1])

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package_dir), *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        if package_dir.resolve().parent != top:  # installed inside some other repository: not the pipeline's
            return None
        commit = git("rev-parse", "HEAD").strip()
        changes = git("status", "--porcelain").splitlines()
        diff = git("diff", "HEAD", "--binary") if changes else ""
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        "root": str(top),
        "commit": commit,
        "dirty": bool(changes),
        # the tracked files' changes, to tell two dirty states apart (untracked files are only listed)
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
        "changes": changes[:_MAX_CHANGES],
        "changes_left_out": max(0, len(changes) - _MAX_CHANGES),
    }


def cpu_pins() -> dict:
    """The CPU kernel pins in force (calibft.core.cpu): the environment variables it sets, numpy's AVX-512 kernels
    in use, and torch's ATen capability when torch is loaded (never imported for this)."""
    from calibft.core.cpu import AVX2_FEATURE_SET, numpy_avx512_kernels

    pins: dict = {
        "machine": platform.machine(),
        "env": {name: os.environ.get(name) for name in AVX2_FEATURE_SET},
    }
    if "numpy" in sys.modules:
        try:
            pins["numpy_avx512_kernels"] = numpy_avx512_kernels()
        except Exception as err:  # numpy's private feature table moved
            pins["numpy_avx512_kernels"] = f"unknown ({type(err).__name__})"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            pins["torch_capability"] = torch.backends.cpu.get_cpu_capability()
            pins["torch_cuda"] = torch.version.cuda
            if torch.cuda.is_initialized():  # asked only where the job already uses the GPUs
                pins["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception as err:  # a partly imported or unusual torch build: the rest still holds
            pins["torch_error"] = f"{type(err).__name__}: {err}"
    return pins
