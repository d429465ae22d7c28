"""``python -m scheduling._cli``: the ``prana`` command."""

import sys

from scheduling._cli import main

sys.exit(main())
