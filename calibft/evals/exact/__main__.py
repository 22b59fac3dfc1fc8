"""`python -m calibft.evals.exact JOB` runs the job (`calibft.evals.exact.runner.main`)."""

from calibft.evals.exact.runner import main

main()
