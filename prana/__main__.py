"""``python -m prana``: the ``prana`` command, the same as the installed script.

The command lives in the shell (``scheduling``); this entry point only hands over to it,
so ``import prana`` itself still never imports the shell.
"""

import sys
from importlib.util import find_spec
from pathlib import Path


def _foreign_scheduling() -> str | None:
    """The folder of a ``scheduling`` package that is not prana's shell, or None.

    ``python -m`` puts the current directory first on ``sys.path``, so a project's own
    ``scheduling/`` there is imported in place of the shell beside this package.
    """
    spec = find_spec("scheduling")
    ours = Path(__file__).resolve().parent.parent / "scheduling"
    found = [Path(p).resolve() for p in (spec.submodule_search_locations or ())] if spec else []
    if not found or ours in found:
        return None
    return str(found[0])


foreign = _foreign_scheduling()
if foreign is not None:
    sys.exit(
        f"prana: the `scheduling` package found first is {foreign}, not prana's shell: a "
        "folder named `scheduling` in the current directory (or on PYTHONPATH) hides it. "
        "Run the installed `prana` command instead, or run `python -m prana` from another "
        "directory, or rename that folder."
    )

from scheduling._cli import main  # noqa: E402 - only once the shell is known to be ours

sys.exit(main())
