from calibft.core.runlog import log_to
from calibft.pipeline.assets import snapshot

# A revision that is not a commit (e.g. `main`) goes through a lock file under resources/locks/models/: the
# first download locks the commit, later ones take it and warn here when the branch has moved (calibft.pipeline.locks).
LOCK_DIR = "resources/locks"

log = log_to(snakemake.log[0])
entry = snakemake.params.entry
commit = snapshot(entry["hf_id"], entry["revision"], snakemake.output[0], lock_dir=LOCK_DIR)
log.info("%s at revision %s (commit %s): %s", entry["hf_id"], entry["revision"], commit, snakemake.output[0])
