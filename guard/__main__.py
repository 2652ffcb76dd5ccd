import sys

from guard.cli import main

sys.exit(main())
