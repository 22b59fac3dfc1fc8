"""`python -m calibft.evals.tinybench JOB` runs the job (`calibft.evals.tinybench.runner.main`)."""

from calibft.evals.tinybench.runner import main

main()
