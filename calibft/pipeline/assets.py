"""Pinned downloads: files the evaluations fetch at run time instead of copying them into the repository.

Each `Asset` names one file by URL and by its content's identity: its SHA-256, or its git blob id (the SHA-1
that git names a file's content by, for a file known only from its repository). `fetch` keeps it in a cache
folder and hands back the cached copy whenever its identity still matches, so a job on a compute node without
network access runs once the file is there (downloaded on a login node, or placed by hand at the path the
error message gives). A download goes to a temporary file next to its destination and is renamed only after
its identity matched, so a half written or wrong file never sits at the cache path. The identity is verified
before the file is read, so a content `check` (which parses it) sees only the pinned bytes. Where no identity
is known, the URL pins the file by a commit and `check` verifies its content instead (the file's SHA-256 is
logged for the record).

Hugging Face repositories (checkpoints, the NoveltyBench evaluators) are fetched with `snapshot` into a folder
that the jobs load with `from_pretrained`: only the files such a load reads (`files_to_download`; `download_plan`
lists them with their bytes from the Hub's file metadata), not the other formats' copies a repository may carry
(gpt-oss's original/ and metal/, Llama's original/*.pth, GGUF, ONNX, TensorFlow and Flax weights). Datasets are
exported one split at a time with `export_dataset`, which downloads and prepares that split's data files alone.
Both download a commit (a branch goes through a lock file, calibft.pipeline.locks) and stop when what they got is
not that commit's content. Their errors say what to download and how, and how to get access to a gated repository.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from calibft.core.io import atomic_path
from calibft.lm.models import DOWNLOAD_RECORDS

_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Asset:
    """One pinned file: where it comes from, its content's identity, and its name in the cache.

    The identity is its SHA-256 or its git blob id (both lowercase hex). Without either, the URL must pin a
    commit and `check` must verify the content (it raises ValueError on a wrong file). A `check` beside an
    identity runs after the identity matched.
    """

    name: str  # what it is, for messages
    url: str
    sha256: str | None
    filename: str
    check: Callable[[Path], None] | None = None
    git_blob: str | None = None  # the file's git blob id in its repository (`git_blob_id`)

    def __post_init__(self) -> None:
        if self.sha256 is None and self.git_blob is None and self.check is None:
            raise ValueError(f"asset {self.name!r}: without a sha256 or a git blob id, a content check is needed")
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise ValueError(f"asset {self.name!r}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if self.git_blob is not None and not _SHA1.fullmatch(self.git_blob):
            raise ValueError(f"asset {self.name!r}: git_blob must be 40 lowercase hex digits, got {self.git_blob!r}")
        if not self.filename or Path(self.filename).name != self.filename:
            raise ValueError(f"asset {self.name!r}: filename must be a plain file name, got {self.filename!r}")


class AssetError(RuntimeError):
    """An asset could not be provided: unreachable, or its download is not the pinned content."""


# The authors' 102 open-ended random-generation prompts (docs/metrics.md, Open-ended random generation), a JSON
# array of strings.
OPEN_ENDED_PROMPTS = Asset(
    name="open-ended random-generation prompts",
    url=(
        "https://raw.githubusercontent.com/chandar-lab/calibration-finetuning/"
        "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab/benchmarks/open_random_gen/prompts.json"
    ),
    sha256="343c78f3572ae5a685d25ed41b5eea3577615d0cbccbc69a6a39f06bd9092bd1",
    filename="open_random_gen_prompts.json",
)

# The authors' String Seed of Thought system prompts (their inference/ssot_prompts.py at the same commit), a
# Python file read without being run: calibft.evals.structured.ssot.read_prompts takes its string assignments.
SSOT_PROMPTS = Asset(
    name="String Seed of Thought prompts",
    url=(
        "https://raw.githubusercontent.com/chandar-lab/calibration-finetuning/"
        "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab/src/random_steering/inference/ssot_prompts.py"
    ),
    sha256="717fb4daa53f79ce5498c122ce679311b46d74205365b058a666a95932b3202b",
    filename="ssot_prompts.py",
)


def jsonl_prompts(count: int) -> Callable[[Path], None]:
    """A content check: exactly `count` JSON lines, each an object with a non-empty string `prompt`."""

    def check(path: Path) -> None:
        lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        for i, line in enumerate(lines):
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
                raise ValueError(f"line {i + 1} is not an object with a non-empty `prompt`")
        if len(lines) != count:
            raise ValueError(f"{len(lines)} prompts, expected {count}")

    return check


# NoveltyBench's prompts, from the benchmark's repository at the commit the authors took them from (their
# benchmarks/noveltybench/SOURCE.md): the curated split (100) and WildChat (1,000), JSON lines {id, category?,
# prompt}, as the `yimingzhang/novelty-bench` dataset's `curated` and `wildchat` splits. Each is pinned by its git
# blob id, that of the copy the authors' release vendors (benchmarks/noveltybench/ at commit a09d46dc5f6a), so a
# file of other content is refused before it is read; the row count stays as the content check.
NOVELTYBENCH_COMMIT = "984876e92a5eefe6945f273b8c8543a4e6cff070"
NOVELTYBENCH_PROMPTS = {
    split: Asset(
        name=f"NoveltyBench {split} prompts",
        url=f"https://raw.githubusercontent.com/novelty-bench/novelty-bench/{NOVELTYBENCH_COMMIT}/data/{source}",
        sha256=None,
        filename=f"noveltybench_{split}.jsonl",
        check=jsonl_prompts(count),
        git_blob=blob,
    )
    for split, source, count, blob in [
        ("curated", "curated.jsonl", 100, "a83cbd794a1b11794464dcd9604357ea3d06cb30"),
        ("wildchat", "wildchat-1k.jsonl", 1000, "c70993718a33628ec860b4c273a5a7b5dab09072"),
    ]
}


def _tinybenchmarks_params(path: Path) -> None:
    from calibft.evals.tinybench.gpirt import load_params

    load_params(path)  # a pickle with the entries and keys the estimator reads, else ValueError


# tinyBenchmarks' IRT parameters (docs/metrics.md, TinyBenchmarks and gp-IRT), a pickle of numpy arrays: at a
# pinned commit of the tinyBenchmarks repository, which published no checksum but names the file's content by
# its git blob id there. `fetch` verifies that id before the content check reads the pickle (with the
# restricted unpickler of calibft.evals.tinybench.gpirt), so no byte but the upstream file's is ever unpickled.
TINYBENCHMARKS_PARAMS = Asset(
    name="tinyBenchmarks IRT parameters",
    url=(
        "https://raw.githubusercontent.com/felipemaiapolo/tinyBenchmarks/"
        "74577e0bd1921dd2adf489d3487a6e1ccbb08b82/tinyBenchmarks/tinyBenchmarks.pkl"
    ),
    sha256=None,
    filename="tinyBenchmarks.pkl",
    check=_tinybenchmarks_params,
    git_blob="eb2a0276bafbfc02dbf46c459a1142ff9baeb8a6",
)


def sha256_of(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, read in chunks (assets may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def git_blob_id(path: str | os.PathLike) -> str:
    """The file's git blob id, as `git hash-object` computes it: the SHA-1 of `blob {size}\\0` and the bytes."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def identity_mismatch(asset: Asset, path: str | os.PathLike) -> str | None:
    """None when the file at `path` has the asset's pinned identity (or the asset pins none); otherwise what
    differs, with both hashes: `expected git blob id X, got Y`."""
    pinned = [("sha256", asset.sha256, sha256_of), ("git blob id", asset.git_blob, git_blob_id)]
    for kind, expected, digest in pinned:
        if expected is not None and (got := digest(path)) != expected:
            return f"expected {kind} {expected}, got {got}"
    return None


def cache_path(asset: Asset, cache_dir: str | os.PathLike) -> Path:
    """Where `fetch` keeps the asset (and where a copy placed by hand must go)."""
    return Path(cache_dir) / asset.filename


def fetch(asset: Asset, cache_dir: str | os.PathLike, timeout: float = 60.0) -> Path:
    """The asset's cached file, downloaded first when it is missing or is not the pinned content.

    Raises `AssetError` when the URL cannot be read (saying how to place the file by hand), when the downloaded
    bytes do not have the pinned identity (both hashes and the URL; the download is discarded, unread), or when
    they fail the content check.
    """
    target = cache_path(asset, cache_dir)
    if target.is_file() and _verified(asset, target):
        return target
    with atomic_path(target) as tmp:
        try:
            with urllib.request.urlopen(asset.url, timeout=timeout) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out, _CHUNK)
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise AssetError(
                f"cannot download the {asset.name} ({asset.filename}) from {asset.url}: {err}. "
                f"Without network access here, download it elsewhere and place it at {target.resolve()}; "
                + _how_checked(asset)
            ) from err
        mismatch = identity_mismatch(asset, tmp)
        if mismatch is not None:  # leaving the block by an exception deletes tmp
            raise AssetError(
                f"the download of the {asset.name} from {asset.url} is not the pinned file ({mismatch}); it was "
                "deleted unread. Check the URL and the pinned hash in calibft/pipeline/assets.py"
            )
        if asset.check is not None:
            try:
                asset.check(tmp)
            except ValueError as err:
                raise AssetError(
                    f"the download of the {asset.name} from {asset.url} is not as expected: {err}"
                ) from err
    return target


def _how_checked(asset: Asset) -> str:
    """How `fetch` verifies the asset, for the message that asks for a copy placed by hand."""
    if asset.sha256 is not None:
        return f"it is checked against sha256 {asset.sha256}"
    if asset.git_blob is not None:
        return f"it is checked against git blob id {asset.git_blob} (`git hash-object FILE` prints a file's)"
    return "its content is checked"


def _verified(asset: Asset, path: Path) -> bool:
    """Whether a cached copy is the asset: its identity first (so that a wrong file is never parsed), then its
    content check."""
    if identity_mismatch(asset, path) is not None:
        return False
    if asset.check is None:
        return True
    try:
        asset.check(path)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HubDataset:
    """One split of a Hugging Face dataset, exported to JSON lines (one row per line, in dataset order)."""

    path: str  # e.g. tinyBenchmarks/tinyMMLU
    split: str
    revision: str  # a branch, tag or commit
    name: str | None = None  # the configuration, e.g. winogrande_xl
    gated: bool = False  # needs a Hugging Face token of an account that accepted the dataset's terms


def hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()  # HF_TOKEN, or the token `hf auth login` stored


def export_dataset(dataset: HubDataset, out_file: str | os.PathLike, lock_dir: str | os.PathLike | None = None) -> str:
    """Download one split at `revision` and write its rows to `out_file` (atomically); returns the commit.

    Only that split's data files are downloaded and prepared (`_split_builder`), not the dataset's other splits.

    With a `lock_dir`, a `revision` that is not a commit goes through a lock file there (calibft.pipeline.locks): the
    first download locks the commit the branch resolved to, later ones take the locked commit and log a warning
    (logger `calibft.pipeline.assets`) when the branch has moved upstream since.

    Raises `AssetError` that names the dataset and says what to do: for a gated dataset without a token or
    without access, which terms to accept and how to pass the token; offline, how to export it elsewhere; and
    when `datasets` read another commit than the one asked for (both commits). Raises
    `calibft.pipeline.locks.LockError` for a corrupt lock file.
    """
    import logging

    from datasets import load_dataset_builder
    from huggingface_hub import HfApi

    from calibft.pipeline.locks import locked_revision

    page = f"https://huggingface.co/datasets/{dataset.path}"
    what = f"{dataset.path} ({dataset.name or 'default'} configuration, {dataset.split} split)"
    token = hub_token()
    if dataset.gated and token is None:
        raise AssetError(
            f"{what} is gated and no Hugging Face token is set: accept its terms at {page} with your account, "
            "then set HF_TOKEN (or run `hf auth login`) where this rule runs"
        )
    gated = (
        f"{what} is gated and this token has no access: accept its terms at {page} with the account of HF_TOKEN, "
        "then run the workflow again"
    )

    def by_hand(revision: str) -> str:
        return (
            f"export it on a machine that has it (datasets.load_dataset({dataset.path!r}, {dataset.name!r}, "
            f"split={dataset.split!r}, revision={revision!r}).to_json(PATH)) and place it at "
            f"{Path(out_file).resolve()}"
        )

    def resolve(revision: str) -> str:
        with _hub_errors(f"{what} at revision {revision}", gated, by_hand(revision)):
            return HfApi().dataset_info(dataset.path, revision=revision, token=token).sha

    commit, message, warning = locked_revision("datasets", dataset.path, dataset.revision, lock_dir, resolve)
    if message is not None:
        logging.getLogger(__name__).log(logging.WARNING if warning else logging.INFO, message)
    with _hub_errors(f"{what} at revision {dataset.revision} (commit {commit})", gated, by_hand(commit)):
        builder = load_dataset_builder(dataset.path, dataset.name, revision=commit, token=token)
        # The builder's hash is the commit `datasets` resolved the revision to and reads the data files at.
        _same_commit(builder.hash, commit, f"{what} from {page}")
        builder = _split_builder(builder, dataset, commit, token)
        _same_commit(builder.hash, commit, f"{what} from {page}")
        builder.download_and_prepare()
        rows = builder.as_dataset(split=dataset.split)
    with atomic_path(out_file) as tmp:
        rows.to_json(tmp, lines=True, force_ascii=False)
    return commit


def _split_builder(builder, dataset: HubDataset, commit: str, token: str | None):
    """A builder of the dataset's configuration restricted to the split's data files, so that preparing it
    downloads and converts those files alone (`download_and_prepare` prepares every split its configuration
    lists, and the others can be far larger: tinyHellaSwag's train split, PALOMA's validation split).

    The configuration's `data_files` (split -> files at the commit, for the Hub's packaged parquet, JSON and CSV
    datasets) give the split's files; its features are kept, so the rows are typed as in the whole dataset. The
    builder is returned as it is when it lists no data files of that split or no other split's.
    """
    from datasets import load_dataset_builder
    from datasets.data_files import DataFilesDict

    files = builder.config.data_files
    if not files or dataset.split not in files or len(files) == 1:
        return builder
    return load_dataset_builder(
        dataset.path,
        dataset.name,
        revision=commit,
        token=token,
        data_files=DataFilesDict({dataset.split: files[dataset.split]}),
        features=builder.info.features,
    )


@dataclass(frozen=True)
class HubFile:
    """One file of a Hugging Face repository, as the Hub lists it with its metadata."""

    name: str  # its path in the repository (the Hub's `rfilename`)
    size: int | None  # bytes; None where the Hub listed no size


# What a `from_pretrained` load of a checkpoint, its tokenizer or its processor reads: files at the top of the
# repository (those in subfolders, such as gpt-oss's original/ and metal/ or Llama's original/, are copies in
# other formats) whose names match these patterns (fnmatch, case-sensitive as the Hub's).
LOADED_FILES = {
    "configuration": ("*config.json",),  # config.json, generation_config.json, tokenizer_config.json, ...
    "tokenizer": (
        "tokenizer.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.*",
        "merges.txt",
        "spm.model",  # sentencepiece DeBERTa (microsoft/deberta-v3-large)
    ),
    "chat template": ("chat_template.jinja", "chat_template.json"),
}
# The weights, in order of preference: the first kind whose weight files the repository has is the one taken
# (transformers loads safetensors where there are any), with its shard index.
WEIGHT_FILES = (
    ("*.safetensors", "model.safetensors.index.json"),
    ("pytorch_model*.bin", "pytorch_model.bin.index.json"),  # repositories without safetensors (older evaluators)
)
# Other runtimes' and frameworks' weights: never taken, whatever pattern above their name would match.
NEVER_LOADED = ("*.pth", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.ot", "*.tflite")


def files_to_download(listing: Iterable[HubFile]) -> list[str]:
    """The files of a repository's listing that a `from_pretrained` load reads (`LOADED_FILES`, the preferred
    kind of `WEIGHT_FILES`, none of `NEVER_LOADED`, nothing in a subfolder), sorted by name."""
    top = [f.name for f in listing if "/" not in f.name and not _matches(f.name, NEVER_LOADED)]
    loaded = [pattern for patterns in LOADED_FILES.values() for pattern in patterns]
    for weights, index in WEIGHT_FILES:
        if any(fnmatch.fnmatchcase(name, weights) for name in top):
            loaded += [weights, index]
            break
    return sorted(name for name in top if _matches(name, loaded))


def bytes_to_download(listing: Iterable[HubFile]) -> int | None:
    """The bytes of the files `files_to_download` selects from the listing; None when one has no size."""
    listing = list(listing)
    selected = set(files_to_download(listing))
    sizes = [f.size for f in listing if f.name in selected]
    return None if None in sizes else sum(sizes)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True)
class DownloadPlan:
    """What `snapshot` downloads of a repository: the files a load reads at one commit, and their bytes."""

    repo_id: str
    commit: str
    files: tuple[str, ...]
    total_bytes: int | None  # None when the Hub listed a file without its size
    sizes: dict[str, int] = field(default_factory=dict, compare=False)  # {file: bytes} of those the Hub sized


def download_plan(repo_id: str, revision: str, token: str | None = None) -> DownloadPlan:
    """The files of `repo_id` at `revision` that `snapshot` downloads and their bytes, from the Hub's file
    metadata (one `model_info` call); the plan's commit is the one the revision resolved to.

    The Hub's errors propagate (`snapshot` turns them into `AssetError`s that say what to do). Raises
    `AssetError` when the listing has no file a load reads.
    """
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo_id, revision=revision, files_metadata=True, token=token)
    listing = [HubFile(s.rfilename, s.size) for s in info.siblings or []]
    files = files_to_download(listing)
    if not files:
        raise AssetError(
            f"{repo_id} at revision {revision} (commit {info.sha}) holds no file that a from_pretrained load reads "
            f"(configuration, tokenizer or weights): its files are {', '.join(f.name for f in listing) or 'none'}"
        )
    sizes = {f.name: f.size for f in listing if f.name in files and f.size is not None}
    return DownloadPlan(repo_id, info.sha, tuple(files), bytes_to_download(listing), sizes)


def snapshot(repo_id: str, revision: str, folder: str | os.PathLike, lock_dir: str | os.PathLike | None = None) -> str:
    """Download a Hugging Face model repository at `revision` into `folder`; returns the commit it resolved to.

    With a `lock_dir`, a `revision` that is not a commit goes through a lock file there, as in `export_dataset`.

    Only the files of the commit's `download_plan` are downloaded (those a `from_pretrained` load reads), and each
    is then verified (`verify_snapshot`): there, of that commit, with its content hash.

    Raises `AssetError` saying how to get access (gated repository), how to download it by hand (offline), or
    which file is not the commit's content (both hashes), and `calibft.pipeline.locks.LockError` for a corrupt lock
    file.
    """
    import logging

    from huggingface_hub import HfApi, snapshot_download

    from calibft.pipeline.locks import locked_revision

    folder = Path(folder)
    gated = (
        f"{repo_id} is a gated Hugging Face repository: accept its terms at https://huggingface.co/{repo_id}, "
        "then log in (`hf auth login`) or set HF_TOKEN, and run the workflow again"
    )

    def by_hand(revision: str) -> str:
        return (
            f"run `hf download {repo_id} --revision {revision} --local-dir {folder.resolve()}` on a machine that "
            "has it and copy the folder here"
        )

    def resolve(revision: str) -> str:
        with _hub_errors(f"{repo_id} (revision {revision})", gated, by_hand(revision)):
            return HfApi().model_info(repo_id, revision=revision).sha

    commit, message, warning = locked_revision("models", repo_id, revision, lock_dir, resolve)
    if message is not None:
        logging.getLogger(__name__).log(logging.WARNING if warning else logging.INFO, message)
    with _hub_errors(f"{repo_id} (revision {revision}, commit {commit})", gated, by_hand(commit)):
        plan = download_plan(repo_id, commit, hub_token())
        _same_commit(plan.commit, commit, f"the file listing of {repo_id}")
        logging.getLogger(__name__).info(
            "%s at commit %s: %d files, %s bytes (%s)", repo_id, commit, len(plan.files),
            "unknown" if plan.total_bytes is None else plan.total_bytes, ", ".join(plan.files),
        )  # fmt: skip
        patterns = [glob.escape(name) for name in plan.files]  # each matches its own file's name alone
        snapshot_download(repo_id, revision=commit, local_dir=folder, allow_patterns=patterns)
    verify_snapshot(folder, f"https://huggingface.co/{repo_id}", commit, plan.files)
    return commit


def _same_commit(got: str | None, expected: str, source: str) -> None:
    """Raise `AssetError` when a download came from another commit than the one asked for (hex in any case)."""
    if (got or "").lower() != expected.lower():
        raise AssetError(
            f"the download of {source} is not the commit asked for (expected commit {expected}, got {got}); "
            "delete the output and run the rule again"
        )


def verify_snapshot(folder: str | os.PathLike, source: str, commit: str, files: Iterable[str]) -> int:
    """Check that each of `files` (paths in the repository) is in a `snapshot_download` folder as the content of
    `commit`; returns how many. Other files in the folder are not looked at.

    Each file must be there, with huggingface_hub's download record, of `commit`, and the hash in it must be the
    file's own (SHA-256 or git blob id, as the record's hash is). Raises `AssetError` naming the file, both
    commits or both hashes, and `source`, on the first that is not; and when `files` is empty.
    """
    folder, files = Path(folder), sorted(files)
    redo = f"delete {folder} and run the rule again"
    if not files:
        raise AssetError(f"the snapshot of {source} at commit {commit} in {folder} has no files to verify; {redo}")
    for name in files:
        path = folder / name
        if not path.is_file():
            raise AssetError(f"{path} is missing: the snapshot of {source} at commit {commit} lacks {name}; {redo}")
        record = folder / DOWNLOAD_RECORDS / f"{name}.metadata"
        try:
            recorded_commit, etag = record.read_text(encoding="utf-8").splitlines()[:2]
        except (OSError, ValueError) as err:
            raise AssetError(
                f"{path} in the snapshot of {source} has no readable download record {record} ({err}), so its "
                f"commit cannot be verified; {redo}"
            ) from err
        _same_commit(recorded_commit.strip(), commit, f"{name} of {source}")
        etag = etag.strip()
        kind, got = ("sha256", sha256_of(path)) if _SHA256.fullmatch(etag) else ("git blob id", git_blob_id(path))
        if got != etag:
            raise AssetError(
                f"{path} is not the content of {name} of {source} at commit {commit} (expected {kind} {etag}, "
                f"got {got}); {redo}"
            )
    return len(files)


@contextlib.contextmanager
def _hub_errors(what: str, gated: str, by_hand: str) -> Iterator[None]:
    """Hub failures in the block as `AssetError`: `gated` when access is refused, else a download failure that
    says how to provide the data `by_hand`."""
    from huggingface_hub.errors import GatedRepoError

    try:
        yield
    except AssetError:  # already says what went wrong
        raise
    except Exception as err:  # the hub client's network errors differ between its HTTP backends
        if _caused_by(err, GatedRepoError):  # `datasets` re-raises a refusal as DatasetNotFoundError from it
            raise AssetError(gated) from err
        raise AssetError(
            f"cannot download {what} from the Hugging Face Hub: {err}. Without network access here, {by_hand}"
        ) from err


def _caused_by(err: BaseException, kind: type[BaseException]) -> bool:
    """Whether `err`, or an exception it was raised from or while handling, is a `kind`."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, kind):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False
