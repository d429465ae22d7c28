"""Refuse to run when another distribution's ``scheduling`` package shares our files.

prana is published as ``prana-workflows`` but imported as ``prana`` and ``scheduling``. An
unrelated 2016 package on PyPI is *named* ``scheduling`` and installs a top-level
``scheduling/`` too: installing it after us overwrites ``scheduling/__init__.py``, installing
it before us has ours overwrite it (and ``pip uninstall scheduling`` would then delete our
files), and ``pip check`` notices neither. Both cases fail here in one line that names the
other distribution and how to fix it, instead of an ``ImportError`` deep in someone else's
code later.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DISTRIBUTION = "prana-workflows"
MARKER = "__prana_shell__"
"""Set by our ``scheduling/__init__.py``; a ``scheduling`` module without it is not ours."""


class ForeignSchedulingError(ImportError):
    """The ``scheduling`` package is not (only) prana's; the message says how to fix it."""


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _rival_metadata(site: Path) -> list[str]:
    """Distributions installed beside ``site``'s ``scheduling/`` that own a ``scheduling`` package.

    Only the directory listing and the ``top_level.txt`` of a distribution named like the
    package are read, so the check costs next to nothing at import time.
    """
    try:
        entries = os.listdir(site)
    except OSError:
        return []
    rivals = []
    for entry in entries:
        if not entry.endswith((".dist-info", ".egg-info")):
            continue
        name = entry.rsplit(".", 1)[0].split("-", 1)[0]
        if _normalized(name) == "scheduling":
            rivals.append(entry)
    return sorted(rivals)


def _owner_of(package_file: str) -> str:
    """The distribution that installed ``package_file`` (slow: used only to word the error)."""
    from importlib.metadata import distributions

    target = Path(package_file).resolve()
    for dist in distributions():
        for file in dist.files or ():
            if file.name == "__init__.py" and file.parent.name == "scheduling":
                try:
                    if Path(str(dist.locate_file(file))).resolve() == target:
                        return f"{dist.metadata['Name']} {dist.version}"
                except OSError:  # pragma: no cover - a broken install entry
                    continue
    return "an unknown distribution"


def check(module: object | None = None) -> None:
    """Raise ``ForeignSchedulingError`` unless ``scheduling`` is prana's and prana's alone."""
    module = sys.modules.get("scheduling") if module is None else module
    file = getattr(module, "__file__", None)
    if module is None or file is None:
        return
    if getattr(module, MARKER, False) is not True:
        owner = _owner_of(file)
        raise ForeignSchedulingError(
            f"the `scheduling` package at {Path(file).parent} is {owner}'s, not prana's: "
            f"`pip uninstall scheduling` then `pip install --force-reinstall {DISTRIBUTION}`"
        )
    rivals = _rival_metadata(Path(file).parent.parent)
    if rivals:
        raise ForeignSchedulingError(
            f"another distribution ({', '.join(rivals)}) also installs a `scheduling` package "
            f"over prana's: `pip uninstall scheduling` then "
            f"`pip install --force-reinstall {DISTRIBUTION}`"
        )
