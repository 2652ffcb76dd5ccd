"""``python -m guard.ci``: the PR check's command (``guard.github.ci``)."""

import sys
import traceback

from guard.base.errors import ExitCode
from guard.github.ci import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # never let a crash read as exit 1 ("regression")
        traceback.print_exc()
        sys.exit(int(ExitCode.INFRA))
