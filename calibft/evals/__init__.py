"""One module per evaluation (TinyBenchmarks: a package, `tinybench`); each runs as
`python -m calibft.evals.<name> JOB` from the workflow."""
