"""`python -m calibft.evals.mcq JOB` runs the job (`calibft.evals.mcq.runner.main`)."""

from calibft.evals.mcq.runner import main

main()
