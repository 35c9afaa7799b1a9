import sys

from scalesweep.cli import main

sys.exit(main())
