"""The Hugging Face checks of `calibft preflight`: access, revision and size of every repository the workflow
downloads, and whether the downloads fit on the disk.

Each model repository is checked with `auth_check` (the token in use has access, or the repository is not
gated) and `calibft.pipeline.assets.download_plan` (the revision resolves; the files a load reads and their bytes,
less those already in the snapshot folder with the Hub's size). Each dataset is checked with `auth_check` and
`dataset_info`, its bytes being those of the files of the configuration and split that are read (`split_files`).
Every repository gets its own `Check`, whatever the others found; then one disk check compares the bytes still to
download with the free space where the downloads go. The token is never part of a check's text.

Before any of it, one request with a timeout (`hub_unreachable`) tells whether the Hub answers from here at all:
huggingface_hub's own requests have no timeout, and a login node whose firewall drops packets would otherwise hang
on each repository in turn.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from calibft.pipeline.assets import AssetError, HubDataset, download_plan
from calibft.pipeline.preflight_checks import OK, WARNING, WILL_FAIL, Check

GB = 1_000_000_000
MIN_FREE_LEFT = 0.10  # below this fraction of today's free space left after the downloads: a warning
PROBE_TIMEOUT = 30.0  # seconds for the one request that tells whether the Hub answers from here


@dataclass(frozen=True)
class ModelDownload:
    """A model repository that rule checkpoint_snapshot or evaluator_snapshot downloads, and where."""

    repo_id: str
    revision: str  # branch, tag or commit, as configured
    folder: str  # where the rule puts it, e.g. resources/hf/models/Qwen/Qwen3-0.6B


@dataclass(frozen=True)
class Finding:
    """A repository's check, and the bytes its download still needs (None when they are not known)."""

    check: Check
    bytes_needed: int | None


@dataclass(frozen=True)
class _Failure:
    """What went wrong with a Hub request, for a check's line: the finding, its fix and how bad it is."""

    detail: str
    fix: str
    status: str = WILL_FAIL
    gated: bool = False  # access refused to a gated repository: its listing is still worth looking up


@dataclass(frozen=True)
class _Target:
    """A repository as the failure messages name it."""

    repo_id: str
    repo_type: str  # "model" or "dataset"
    revision: str
    by_hand: str  # how to provide it without the Hub from here
    revision_fix: str  # where the revision is configured

    @property
    def page(self) -> str:
        prefix = "" if self.repo_type == "model" else "datasets/"
        return f"https://huggingface.co/{prefix}{self.repo_id}"


def gb(n: int) -> str:
    """Bytes in GB (1e9 bytes) with one decimal."""
    return f"{n / GB:.1f} GB"


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def hub_checks(
    models: Sequence[ModelDownload],
    datasets: Sequence[HubDataset],
    downloads_root: str | os.PathLike,
    token: str | None,
    *,
    timeout: float = PROBE_TIMEOUT,
) -> list[Check]:
    """One check per model repository, then one per dataset (in the order given, a repeated one once), then the
    disk check of `downloads_root` for the bytes they still need. `token` is the token the downloads will use
    (None: none is set); the Hub is the one huggingface_hub is configured for (HF_ENDPOINT)."""
    models, datasets = list(dict.fromkeys(models)), list(dict.fromkeys(datasets))
    unreachable = hub_unreachable(timeout) if models or datasets else None
    by_model = [(m.repo_id, model_finding(m, token, unreachable)) for m in models]
    by_dataset = [(_dataset_name(d), dataset_finding(d, token, unreachable, timeout)) for d in datasets]
    findings = by_model + by_dataset
    needed = sum(f.bytes_needed or 0 for _, f in findings)
    unknown = [name for name, f in findings if f.bytes_needed is None]
    models_unknown = any(f.bytes_needed is None for _, f in by_model)
    checks = [f.check for _, f in findings] + [disk_check(downloads_root, needed, unknown, models_unknown)]
    return [_without_token(check, token) for check in checks]


def _dataset_name(dataset: HubDataset) -> str:
    return f"{dataset.path} ({dataset.name or 'default'} configuration, {dataset.split} split)"


def hub_unreachable(timeout: float) -> Exception | None:
    """None when the Hub answers a HEAD request of its endpoint (any status) within `timeout` seconds; else the
    error (offline mode, name resolution, refused connection, timeout, proxy)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as err:  # whatever stops the request means the Hub cannot be reached from here
        return err
    return None


def model_finding(model: ModelDownload, token: str | None, unreachable: Exception | None = None) -> Finding:
    """The check of one model repository and the bytes its snapshot still needs.

    Access first (`auth_check`): a gated repository without access will fail, but its revision and size are
    still looked up (the Hub lists a gated repository's files to anyone), so the line says all that is wrong
    and the disk check counts its bytes. A repository that does not exist, or a Hub that cannot be reached,
    ends the check there."""
    subject = f"hub {model.repo_id}"
    target = _Target(
        model.repo_id,
        "model",
        model.revision,
        by_hand=(
            f"download it where there is network (`hf download {model.repo_id} --revision {model.revision} "
            f"--local-dir {model.folder}`) and copy the folder to {model.folder} here"
        ),
        revision_fix=f"as the `revision` beside `hf_id: {model.repo_id}`",
    )
    if unreachable is not None:
        return _failed(subject, [_failure(unreachable, target, token)])
    access = _access(target, token)
    if access is not None and not access.gated:
        return _failed(subject, [access])
    try:
        plan = download_plan(model.repo_id, model.revision, token)
        present = present_bytes(model.folder, plan.files, lambda: plan.sizes)
    except Exception as err:  # each kind of failure becomes the line's finding, none stops the other checks
        return _failed(subject, _with_listing_failure(access, _failure(err, target, token)))
    needed = plan.total_bytes - present
    found = (
        f"revision {model.revision} → commit {plan.commit[:7]}, {_files(len(plan.files))}, {gb(needed)} "
        f"({needed:,} bytes) to download ({gb(present)} already in {model.folder})"
    )
    if access is not None:
        return Finding(Check(WILL_FAIL, subject, f"{access.detail}; {found}", access.fix), needed)
    return Finding(Check(OK, subject, found), needed)


def dataset_finding(
    dataset: HubDataset, token: str | None, unreachable: Exception | None = None, timeout: float = PROBE_TIMEOUT
) -> Finding:
    """The check of one dataset split and the bytes of its files (None when the listing does not show which
    files are the split's). A dataset configured as gated needs a token even where the Hub would answer
    without one, as `calibft.pipeline.assets.export_dataset` refuses to start without it."""
    from huggingface_hub import HfApi

    subject = f"hub dataset {_dataset_name(dataset)}"
    target = _Target(
        dataset.path,
        "dataset",
        dataset.revision,
        by_hand=(
            f"export the split where there is network (datasets.load_dataset({dataset.path!r}, {dataset.name!r}, "
            f"split={dataset.split!r}, revision={dataset.revision!r}).to_json(PATH)) and place it where its rule "
            "writes it under resources/"
        ),
        revision_fix="as the `revision` of the evaluation that reads it (evaluation.tinybenchmarks or .paloma)",
    )
    if unreachable is not None:
        return _failed(subject, [_failure(unreachable, target, token)])
    access = _access(target, token)
    if access is None and dataset.gated and token is None:
        access = _gated_failure(target, token, "is configured as gated (gated: true), so its export needs a token")
    if access is not None and not access.gated:
        return _failed(subject, [access])
    try:
        info = HfApi().dataset_info(
            dataset.path, revision=dataset.revision, files_metadata=True, token=token, timeout=timeout
        )
    except Exception as err:  # each kind of failure becomes the line's finding, none stops the other checks
        return _failed(subject, _with_listing_failure(access, _failure(err, target, token)))
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    files = split_files(sizes, dataset)
    found = f"revision {dataset.revision} → commit {(info.sha or '?')[:7]}, "
    if files and all(sizes[name] is not None for name in files):
        needed = sum(sizes[name] for name in files)
        found += f"{_files(len(files))} of the split, {gb(needed)} ({needed:,} bytes) to download"
    else:  # reachable; which files are the split's, or their sizes, is not clear from the listing
        needed = None
        found += f"size not known from the listing ({len(sizes)} files, {len(files)} recognized as the split's)"
    if access is not None:
        return Finding(Check(WILL_FAIL, subject, f"{access.detail}; {found}", access.fix), needed)
    return Finding(Check(OK, subject, found), needed)


def split_files(names: Iterable[str], dataset: HubDataset) -> list[str]:
    """The files (paths in the repository) of a dataset's listing that hold the configuration and split `dataset`
    reads, as the Hub's packaged parquet and JSON layouts name them: under a folder named after the configuration
    (when one other than `default` is named), and in a folder named after the split or with the split as the file
    name's prefix, e.g. `wikitext_103/test/...` or `data/test-00000-of-00001.parquet`. Empty when none matches."""
    return [name for name in names if _is_split_file(name, dataset)]


def _is_split_file(name: str, dataset: HubDataset) -> bool:
    path = PurePosixPath(name)
    folders = path.parts[:-1]
    if dataset.name not in (None, "default") and dataset.name not in folders:
        return False
    stem_prefix = any(path.name.startswith(dataset.split + sep) for sep in "-_.")
    return dataset.split in folders or stem_prefix


def present_bytes(folder: str | os.PathLike, files: Sequence[str], hub_sizes: Callable[[], dict[str, int]]) -> int:
    """The bytes of `files` (paths in the repository) already in `folder` with the size the Hub gives them;
    `hub_sizes()` ({path: bytes}) is asked only when one of them is there."""
    folder = Path(folder)
    there = [name for name in files if (folder / name).is_file()]
    if not there:
        return 0
    sizes = hub_sizes()
    return sum(sizes[name] for name in there if name in sizes and (folder / name).stat().st_size == sizes[name])


def disk_check(downloads_root: str | os.PathLike, needed: int, unknown: Sequence[str], models_unknown: bool) -> Check:
    """Whether `needed` bytes fit in the free space of `downloads_root`'s file system (measured at its nearest
    existing folder): WILL FAIL when they exceed it, WARNING when less than 10% of it would remain or when a
    model's size is not known, else OK. `unknown` names the repositories whose bytes are not in `needed`."""
    root = Path(downloads_root)
    measured = _nearest_existing(root)
    free = shutil.disk_usage(measured).free
    where = f"{root}" if measured == root.absolute() else f"{measured} ({root} does not exist yet)"
    figures = f"{gb(needed)} ({needed:,} bytes) to download, {gb(free)} ({free:,} bytes) free at {where}"
    if unknown:
        figures = f"at least {figures}; sizes not known: {', '.join(unknown)}"
    subject = f"disk {root}"
    larger = (
        f"point {root} at a larger file system (e.g. move resources/ there and symlink it: "
        "`ln -s /scratch/$USER/resources resources`)"
    )
    if needed > free:
        return Check(WILL_FAIL, subject, figures, f"free {gb(needed - free)} more there, or {larger}")
    if free - needed < MIN_FREE_LEFT * free:
        left = f"{figures}; less than {MIN_FREE_LEFT:.0%} of the free space would remain"
        return Check(WARNING, subject, left, f"free space there, or {larger}")
    if models_unknown:
        return Check(WARNING, subject, f"{figures}; with a model's size unknown, the space may not suffice")
    return Check(OK, subject, figures)


def _nearest_existing(path: Path) -> Path:
    """`path` (absolute) or its nearest parent that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _access(target: _Target, token: str | None) -> _Failure | None:
    """None when the token in use (or none) may download the repository, per the Hub's `auth_check`."""
    from huggingface_hub import HfApi

    try:
        HfApi().auth_check(target.repo_id, repo_type=target.repo_type, token=token)
    except Exception as err:  # each kind of failure becomes the line's finding
        return _failure(err, target, token)
    return None


def _with_listing_failure(access: _Failure | None, listing: _Failure) -> list[_Failure]:
    """The failures of a repository whose listing failed after `access` (None, or a gated refusal): both, but a
    second gated refusal once."""
    if access is None:
        return [listing]
    return [access] if listing.gated else [access, listing]


def _gated_failure(target: _Target, token: str | None, why: str) -> _Failure:
    """A gated repository without access: accept the terms with the token's account, then set the token."""
    if token is None:
        detail = f"{target.repo_id} {why or 'is gated'} and no Hugging Face token is set"
        account = "your account"
    else:
        detail = f"{target.repo_id} {why or 'is gated'} and the token in use has no access"
        account = "the account of the token in use (`hf auth whoami` names it)"
    fix = (
        f"accept the terms at {target.page} with {account}, then set HF_TOKEN or run `hf auth login` "
        "where Snakemake runs"
    )
    return _Failure(detail, fix, gated=True)


def _failure(err: Exception, target: _Target, token: str | None) -> _Failure:
    """What a Hub request's error means for the download, and its fix."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    kind = target.repo_type
    if isinstance(err, GatedRepoError):  # before RepositoryNotFoundError, its base class
        return _gated_failure(target, token, "")
    if isinstance(err, RevisionNotFoundError):
        return _Failure(
            f"revision {target.revision} of the {kind} {target.repo_id} does not resolve on the Hub",
            f"pin an existing revision (a branch, tag or 40-hex commit) in config.yaml, {target.revision_fix}",
        )
    if isinstance(err, RepositoryNotFoundError):
        hidden = " (or it is private or gated, and no token is set)" if token is None else ""
        return _Failure(
            f"the {kind} {target.repo_id} does not exist on the Hub{hidden}",
            f"check the id in config.yaml against {target.page}; for a private repository, set HF_TOKEN of an "
            "account with access where Snakemake runs",
        )
    if isinstance(err, DisabledRepoError):
        return _Failure(f"the {kind} {target.repo_id} is disabled on the Hub", f"configure another one; {_by(target)}")
    if isinstance(err, OfflineModeIsEnabled):
        return _Failure(
            "HF_HUB_OFFLINE is set, so huggingface_hub does not reach the Hub",
            f"unset HF_HUB_OFFLINE where Snakemake runs, or {target.by_hand}",
        )
    if isinstance(err, HfHubHTTPError):
        status = err.response.status_code if err.response is not None else None
        if status == 401 and token is not None:
            return _Failure(
                f"the Hub refused the token in use (HTTP 401) for {target.repo_id}",
                "set HF_TOKEN to a valid token (or run `hf auth login`) where Snakemake runs",
            )
        if status is not None and (status >= 500 or status == 429):  # the Hub's trouble, likely passing
            return _Failure(
                f"the Hub answered HTTP {status} for {target.repo_id}, so it could not be checked",
                "run preflight again later",
                WARNING,
            )
        return _Failure(f"the Hub refused {target.repo_id}: {_first_line(err)}", _by(target))
    if isinstance(err, httpx2.TransportError | OSError):
        return _Failure(
            f"the Hugging Face Hub ({constants.ENDPOINT}) could not be reached from here: {_first_line(err)}",
            f"run preflight where the workflow's downloads run (the host of Snakemake, with network), or "
            f"{target.by_hand}",
        )
    if isinstance(err, HFValidationError):
        return _Failure(f"{target.repo_id!r} is not a valid repository id: {_first_line(err)}", _by(target))
    if isinstance(err, AssetError):  # download_plan: no file a load reads, or a file without its size
        return _Failure(str(err), f"configure a repository (or revision) that transformers can load; {_by(target)}")
    return _Failure(f"checking {target.repo_id} failed: {type(err).__name__}: {_first_line(err)}", _by(target))


def _by(target: _Target) -> str:
    return f"see {target.page}; or {target.by_hand}"


def _first_line(err: Exception) -> str:
    """An error's message on one line (huggingface_hub's run over several)."""
    return " ".join(str(err).split()) or type(err).__name__


def _failed(subject: str, failures: Sequence[_Failure]) -> Finding:
    """The check of a repository that will fail (or could not be checked): every failure's finding and fix on
    its line; its bytes are not known."""
    status = WILL_FAIL if any(f.status == WILL_FAIL for f in failures) else WARNING
    detail = "; ".join(f.detail for f in failures)
    fix = "; ".join(dict.fromkeys(f.fix for f in failures))
    return Finding(Check(status, subject, detail, fix), None)


def _without_token(check: Check, token: str | None) -> Check:
    """The check with the token, should a message of the Hub's quote it, masked."""
    if not token:
        return check

    def mask(text: str | None) -> str | None:
        return None if text is None else text.replace(token, "hf_***")

    return Check(check.status, check.subject, mask(check.detail), mask(check.fix))
