from pathlib import Path

from calibft.core.runlog import log_to
from calibft.pipeline import assets

log = log_to(snakemake.log[0])
asset = getattr(assets, snakemake.params.asset)
if "key" in snakemake.params.keys():  # one of a family of assets, e.g. a NoveltyBench split
    asset = asset[snakemake.params.key]
# `fetch` verifies the pinned sha256 or git blob id before anything reads the file, then the content check.
path = assets.fetch(asset, Path(snakemake.output[0]).parent)
log.info("%s: %s (sha256 %s, git blob id %s)", asset.name, path, assets.sha256_of(path), assets.git_blob_id(path))
