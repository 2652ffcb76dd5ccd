"""What the GitHub workflows run: ``python -m guard.ci`` (the PR check),
``guard.github.comment`` (the PR comment, standard library only) and
``guard.github.perf_test`` (the maintainer's word and the check run, standard library
only)."""
