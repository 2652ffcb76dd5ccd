"""``python -m guard.ci``: the PR check's command (``guard.github.ci``)."""

from guard.github.ci import entry

if __name__ == "__main__":
    entry()
