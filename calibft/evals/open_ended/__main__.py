"""`python -m calibft.evals.open_ended JOB` runs the job (`calibft.evals.open_ended.runner.main`)."""

from calibft.evals.open_ended.runner import main

main()
