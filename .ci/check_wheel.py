"""Check the built wheel: both packages typed, the license shipped, the distribution named."""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser

DEV_TOOLS = ("pytest", "hypothesis", "mypy", "ruff", "mkdocs", "playwright", "pyright", "build")
"""Tools for working on prana: the `dev` dependency group, never a user's requirement."""


def main(path: str) -> int:
    """Print what is missing from the wheel at ``path``; exit 1 if anything is."""
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(meta_name).decode())
    problems = [
        f"missing {need}"
        for need in ("prana/py.typed", "scheduling/py.typed", "prana/__main__.py")
        if need not in names
    ]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("missing the LICENSE file in .dist-info/licenses/")
    if meta["Name"] != "prana-workflows":
        problems.append(f"distribution name is {meta['Name']!r}, not 'prana-workflows'")
    dev = [r for r in meta.get_all("Requires-Dist") or [] if r.startswith(DEV_TOOLS)]
    if dev or "dev" in (meta.get_all("Provides-Extra") or []):
        problems.append(f"dev tools in the published metadata: {dev or 'the dev extra'}")
    if any(n.startswith(("tests/", "docs/")) for n in names):
        problems.append("tests/ or docs/ leaked into the wheel")
    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: ok ({len(names)} files, {meta['Name']} {meta['Version']})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
