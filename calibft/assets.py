"""Pinned downloads: files the evaluations fetch at run time instead of copying them into the repository.

Each `Asset` names one file by URL and SHA-256. `fetch` keeps it in a cache folder and hands back the cached
copy whenever its checksum still matches, so a job on a compute node without network access runs once the
file is there (downloaded on a login node, or placed by hand at the path the error message gives). A download
goes to a temporary file next to its destination and is renamed only after its checksum matched, so a half
written or wrong file never sits at the cache path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from calibft.io import atomic_path

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    """One pinned file: where it comes from, its SHA-256 (lowercase hex), and its name in the cache."""

    name: str  # what it is, for messages
    url: str
    sha256: str
    filename: str

    def __post_init__(self) -> None:
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            raise ValueError(f"asset {self.name!r}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if not self.filename or Path(self.filename).name != self.filename:
            raise ValueError(f"asset {self.name!r}: filename must be a plain file name, got {self.filename!r}")


class AssetError(RuntimeError):
    """An asset could not be provided: unreachable, or its download did not match the pinned checksum."""


# The authors' 102 open-ended random-generation prompts (REFERENCE section 8), a JSON array of strings.
OPEN_ENDED_PROMPTS = Asset(
    name="open-ended random-generation prompts",
    url=(
        "https://raw.githubusercontent.com/chandar-lab/calibration-finetuning/"
        "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab/benchmarks/open_random_gen/prompts.json"
    ),
    sha256="343c78f3572ae5a685d25ed41b5eea3577615d0cbccbc69a6a39f06bd9092bd1",
    filename="open_random_gen_prompts.json",
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
    if target.is_file() and sha256_of(target) == asset.sha256:
        return target
    with atomic_path(target) as tmp:
        try:
            with urllib.request.urlopen(asset.url, timeout=timeout) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out, _CHUNK)
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise AssetError(
                f"cannot download the {asset.name} ({asset.filename}) from {asset.url}: {err}. "
                f"Without network access here, download it elsewhere and place it at {target.resolve()}; "
                f"it is checked against sha256 {asset.sha256}"
            ) from err
        got = sha256_of(tmp)
        if got != asset.sha256:  # leaving the block by an exception deletes the temporary file
            raise AssetError(
                f"the download of the {asset.name} from {asset.url} does not match its pinned checksum "
                f"(expected sha256 {asset.sha256}, got {got}); it was deleted"
            )
    return target
