"""What every stage uses: atomic files, checks, seeds, CPU kernels, ragged arrays, run logs, provenance,
checkpoints of a preemptible job, the protocol switches."""
