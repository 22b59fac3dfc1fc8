"""`python -m calibft.evals.structured JOB` runs the job (`calibft.evals.structured.runner.main`)."""

from calibft.evals.structured.runner import main

main()
