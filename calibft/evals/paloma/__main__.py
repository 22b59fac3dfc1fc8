"""`python -m calibft.evals.paloma JOB` runs the job (`calibft.evals.paloma.runner.main`)."""

from calibft.evals.paloma.runner import main

main()
