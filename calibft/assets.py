"""Pinned downloads: files the evaluations fetch at run time instead of copying them into the repository.

Each `Asset` names one file by URL and SHA-256. `fetch` keeps it in a cache folder and hands back the cached
copy whenever its checksum still matches, so a job on a compute node without network access runs once the
file is there (downloaded on a login node, or placed by hand at the path the error message gives). A download
goes to a temporary file next to its destination and is renamed only after its checksum matched, so a half
written or wrong file never sits at the cache path. Where no checksum was published, the URL pins the file by
a commit and `check` verifies its content instead (the file's SHA-256 is logged for the record).

Hugging Face repositories (the NoveltyBench evaluators) are fetched whole with `snapshot`, into a folder that
the jobs load with `from_pretrained`; its errors say what to download and how, and how to get access to a
gated repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from calibft.io import atomic_path

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    """One pinned file: where it comes from, its SHA-256 (lowercase hex), and its name in the cache.

    Without a published SHA-256 (`sha256=None`) the URL must pin a commit and `check` must verify the content
    (it raises ValueError on a wrong file).
    """

    name: str  # what it is, for messages
    url: str
    sha256: str | None
    filename: str
    check: Callable[[Path], None] | None = None

    def __post_init__(self) -> None:
        if self.sha256 is None and self.check is None:
            raise ValueError(f"asset {self.name!r}: without a sha256, a content check is needed")
        if self.sha256 is not None and (
            len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256)
        ):
            raise ValueError(f"asset {self.name!r}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if not self.filename or Path(self.filename).name != self.filename:
            raise ValueError(f"asset {self.name!r}: filename must be a plain file name, got {self.filename!r}")


class AssetError(RuntimeError):
    """An asset could not be provided: unreachable, or its download did not match the pinned checksum."""


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
# Python file read without being run: calibft.evals.ssot_release.read_prompts takes its string assignments.
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
# prompt}, as the `yimingzhang/novelty-bench` dataset's `curated` and `wildchat` splits.
NOVELTYBENCH_COMMIT = "984876e92a5eefe6945f273b8c8543a4e6cff070"
NOVELTYBENCH_PROMPTS = {
    split: Asset(
        name=f"NoveltyBench {split} prompts",
        url=f"https://raw.githubusercontent.com/novelty-bench/novelty-bench/{NOVELTYBENCH_COMMIT}/data/{source}",
        sha256=None,
        filename=f"noveltybench_{split}.jsonl",
        check=jsonl_prompts(count),
    )
    for split, source, count in [("curated", "curated.jsonl", 100), ("wildchat", "wildchat-1k.jsonl", 1000)]
}


def _tinybenchmarks_params(path: Path) -> None:
    from calibft.evals.gpirt import load_params

    load_params(path)  # a pickle with the entries and keys the estimator reads, else ValueError


# tinyBenchmarks' IRT parameters (docs/metrics.md, TinyBenchmarks and gp-IRT), a pickle of numpy arrays: at a
# pinned commit of the tinyBenchmarks repository, which published no checksum; the content check loads it.
TINYBENCHMARKS_PARAMS = Asset(
    name="tinyBenchmarks IRT parameters",
    url=(
        "https://raw.githubusercontent.com/felipemaiapolo/tinyBenchmarks/"
        "74577e0bd1921dd2adf489d3487a6e1ccbb08b82/tinyBenchmarks/tinyBenchmarks.pkl"
    ),
    sha256=None,
    filename="tinyBenchmarks.pkl",
    check=_tinybenchmarks_params,
)


def sha256_of(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, read in chunks (assets may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def cache_path(asset: Asset, cache_dir: str | os.PathLike) -> Path:
    """Where `fetch` keeps the asset (and where a copy placed by hand must go)."""
    return Path(cache_dir) / asset.filename


def fetch(asset: Asset, cache_dir: str | os.PathLike, timeout: float = 60.0) -> Path:
    """The asset's cached file, downloaded first when it is missing or does not match its checksum.

    Raises `AssetError` when the URL cannot be read (saying how to place the file by hand) or when the
    downloaded bytes do not match the pinned SHA-256 (the download is discarded).
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
                + (f"it is checked against sha256 {asset.sha256}" if asset.sha256 else "its content is checked")
            ) from err
        got = sha256_of(tmp)
        if asset.sha256 is not None and got != asset.sha256:  # leaving the block by an exception deletes tmp
            raise AssetError(
                f"the download of the {asset.name} from {asset.url} does not match its pinned checksum "
                f"(expected sha256 {asset.sha256}, got {got}); it was deleted"
            )
        if asset.check is not None:
            try:
                asset.check(tmp)
            except ValueError as err:
                raise AssetError(
                    f"the download of the {asset.name} from {asset.url} is not as expected: {err}"
                ) from err
    return target


def _verified(asset: Asset, path: Path) -> bool:
    """Whether a cached copy is the asset: its checksum, or (without one) its content check."""
    if asset.sha256 is not None:
        return sha256_of(path) == asset.sha256
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


def _hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()  # HF_TOKEN, or the token `hf auth login` stored


def export_dataset(dataset: HubDataset, out_file: str | os.PathLike, lock_dir: str | os.PathLike | None = None) -> str:
    """Download one split at `revision` and write its rows to `out_file` (atomically); returns the commit.

    With a `lock_dir`, a `revision` that is not a commit goes through a lock file there (calibft.locks): the
    first download locks the commit the branch resolved to, later ones take the locked commit and log a warning
    (logger `calibft.assets`) when the branch has moved upstream since.

    Raises `AssetError` that names the dataset and says what to do: for a gated dataset without a token or
    without access, which terms to accept and how to pass the token; offline, how to export it elsewhere.
    Raises `calibft.locks.LockError` for a corrupt lock file.
    """
    import logging

    from datasets import load_dataset
    from huggingface_hub import HfApi

    from calibft.locks import locked_revision

    page = f"https://huggingface.co/datasets/{dataset.path}"
    what = f"{dataset.path} ({dataset.name or 'default'} configuration, {dataset.split} split)"
    token = _hub_token()
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
        rows = load_dataset(dataset.path, dataset.name, split=dataset.split, revision=commit, token=token)
    with atomic_path(out_file) as tmp:
        rows.to_json(tmp, lines=True, force_ascii=False)
    return commit


def snapshot(repo_id: str, revision: str, folder: str | os.PathLike, lock_dir: str | os.PathLike | None = None) -> str:
    """Download a Hugging Face model repository at `revision` into `folder`; returns the commit it resolved to.

    With a `lock_dir`, a `revision` that is not a commit goes through a lock file there, as in `export_dataset`.

    Raises `AssetError` saying how to get access (gated repository) or how to download it by hand (offline),
    and `calibft.locks.LockError` for a corrupt lock file.
    """
    import logging

    from huggingface_hub import HfApi, snapshot_download

    from calibft.locks import locked_revision

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
        snapshot_download(repo_id, revision=commit, local_dir=folder)
    return commit


@contextlib.contextmanager
def _hub_errors(what: str, gated: str, by_hand: str) -> Iterator[None]:
    """Hub failures in the block as `AssetError`: `gated` when access is refused, else a download failure that
    says how to provide the data `by_hand`."""
    from huggingface_hub.errors import GatedRepoError

    try:
        yield
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
