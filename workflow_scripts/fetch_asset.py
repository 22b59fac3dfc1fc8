from pathlib import Path

from calibft import assets
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
asset = getattr(assets, snakemake.params.asset)
path = assets.fetch(asset, Path(snakemake.output[0]).parent)
log.info("%s: %s (sha256 %s)", asset.name, path, asset.sha256)
