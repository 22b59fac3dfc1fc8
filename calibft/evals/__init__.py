"""One module per evaluation; each runs as `python -m calibft.evals.<name> JOB` from the workflow."""
