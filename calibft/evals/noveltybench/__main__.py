"""`python -m calibft.evals.noveltybench generate|score JOB` runs the job (`calibft.evals.noveltybench.runner.main`)."""

from calibft.evals.noveltybench.runner import main

main()
