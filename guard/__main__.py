import sys

from guard.commands.main import main

sys.exit(main())
