from calibft.core.runlog import log_to
from calibft.pipeline.assets import HubDataset, export_dataset

# A revision that is not a commit (e.g. `main`) goes through a lock file under resources/locks/datasets/: the
# first download locks the commit, later ones take it and warn here when the branch has moved (calibft.pipeline.locks).
LOCK_DIR = "resources/locks"

log = log_to(snakemake.log[0])
dataset = HubDataset(**snakemake.params.dataset)
commit = export_dataset(dataset, snakemake.output[0], lock_dir=LOCK_DIR)
log.info("%s (%s, %s) at revision %s, commit %s: %s", dataset.path, dataset.name, dataset.split, dataset.revision,
         commit, snakemake.output[0])  # fmt: skip
