"""``python -m prana``: the ``prana`` command, the same as the installed script.

The command lives in the shell (``scheduling``); this entry point only hands over to it,
so ``import prana`` itself still never imports the shell.
"""

import sys

from scheduling._cli import main

sys.exit(main())
