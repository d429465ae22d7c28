"""The distribution: name, version, entry points, and the guard against a foreign scheduling."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import prana
import scheduling

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pytest brings tomli there)
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEV_TOOLS = ("pytest", "hypothesis", "mypy", "ruff", "mkdocs", "playwright", "pyright", "build")
FOREIGN_INIT = textwrap.dedent(
    """
    # the unrelated 2016 `scheduling` package's __init__.py, as PyPI ships it
    from scheduling.graph import CircularDependency
    """
)


def _foreign_dist_info(site: Path) -> None:
    """Write the metadata pip leaves for the unrelated ``scheduling`` 0.0.2 distribution."""
    info = site / "scheduling-0.0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scheduling\nVersion: 0.0.2\n")
    (info / "top_level.txt").write_text("scheduling\n")
    (info / "RECORD").write_text(
        "scheduling/__init__.py,,\nscheduling/graph.py,,\nscheduling-0.0.2.dist-info/RECORD,,\n"
    )


def _site_with_our_scheduling(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "scheduling", site / "scheduling", ignore=shutil.ignore_patterns("__pycache__")
    )
    return site


def _python(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=site,
        check=False,
    )


def test_distribution_name_version_and_license() -> None:
    """Installed as prana-workflows, MIT, and ``prana.__version__`` is the installed version."""
    meta = importlib.metadata.metadata("prana-workflows")
    assert meta["Name"] == "prana-workflows"
    assert prana.__version__ == importlib.metadata.version("prana-workflows")
    assert meta["License-Expression"] == "MIT"
    assert any(url.startswith("Documentation") for url in meta.get_all("Project-URL") or [])
    assert "Typing :: Typed" in (meta.get_all("Classifier") or [])


def test_procrastinate_extra_is_bounded_and_test_tools_are_not_published() -> None:
    """The procrastinate extra has an upper bound; the dev tools are a PEP 735 dependency
    group, not an extra: nothing of them in the metadata a wheel publishes (they were an
    extra, ``dev``, listed by every index page and resolver)."""
    project = PYPROJECT["project"]
    procrastinate = project["optional-dependencies"]["procrastinate"]
    assert all("<" in r for r in procrastinate)
    assert "dev" not in project["optional-dependencies"]
    published = [r for extra in project["optional-dependencies"].values() for r in extra]
    published += project["dependencies"]
    assert [r for r in published if r.startswith(DEV_TOOLS)] == []
    group = PYPROJECT["dependency-groups"]["dev"]
    assert {"pytest", "hypothesis", "mypy", "ruff", "mkdocs"} <= {
        re.split(r"[<>=\[ ]", r)[0] for r in group
    }


def test_py_typed_markers_exist() -> None:
    """Both packages carry py.typed, so type checkers read their annotations."""
    assert (Path(prana.__file__).parent / "py.typed").is_file()
    assert (Path(scheduling.__file__).parent / "py.typed").is_file()


@pytest.mark.parametrize(
    "argv", [["-m", "prana", "--version"], ["-m", "scheduling._cli", "--version"]]
)
def test_python_dash_m_prana_and_version(argv: list[str]) -> None:
    """``python -m prana --version`` starts with the version and the distribution name."""
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
    first = out.stdout.splitlines()[0]
    assert first == f"prana {prana.__version__} (distribution prana-workflows)"


def test_python_dash_m_prana_runs_the_cli() -> None:
    """``python -m prana`` is the ``prana`` command (its help lists the commands)."""
    out = subprocess.run(
        [sys.executable, "-m", "prana", "--help"], capture_output=True, text=True, check=True
    )
    assert "run" in out.stdout
    assert "worker" in out.stdout


def test_foreign_scheduling_installed_over_ours_fails_in_one_line(tmp_path: Path) -> None:
    """When the PyPI ``scheduling`` overwrote our __init__, the command names it in one line."""
    site = _site_with_our_scheduling(tmp_path)
    (site / "scheduling" / "__init__.py").write_text(FOREIGN_INIT)
    (site / "scheduling" / "graph.py").write_text("class CircularDependency(Exception): ...\n")
    _foreign_dist_info(site)
    result = _python(site, "from scheduling._cli import main; raise SystemExit(main(['list']))")
    assert result.returncode == 5
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "scheduling 0.0.2's, not prana's" in lines[0]
    assert "pip uninstall scheduling" in lines[0]
    assert "prana-workflows" in lines[0]


def test_foreign_scheduling_installed_under_ours_fails_at_import(tmp_path: Path) -> None:
    """When ours overwrote the PyPI ``scheduling``, ``import scheduling`` fails naming it."""
    site = _site_with_our_scheduling(tmp_path)
    _foreign_dist_info(site)
    result = _python(site, "import scheduling")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("scheduling._ownership.ForeignSchedulingError: another distribution")
    assert "scheduling-0.0.2.dist-info" in last
    assert "pip install --force-reinstall prana-workflows" in last


def test_our_scheduling_alone_imports(tmp_path: Path) -> None:
    """Without a rival distribution, the same copied package imports cleanly."""
    site = _site_with_our_scheduling(tmp_path)
    result = _python(site, "import scheduling; print(scheduling.__prana_shell__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_docstrings_cite_only_shipped_documents() -> None:
    """No module of either package cites a document the wheel and the docs site do not ship."""
    unshipped = re.compile(r"DESIGN|STYLE\.md|PROFILE\.md|\bREADME\b|(?<![\w/])docs/\w")
    found = []
    for package in (Path(prana.__file__).parent, Path(scheduling.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if unshipped.search(line) and "piercefreeman/" not in line:
                    found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []


def test_every_pip_install_in_the_docs_names_our_distribution_and_real_extras() -> None:
    """Each ``pip install`` the README, docs and examples show installs ``prana-workflows``
    (or an editable clone) with extras it defines: ``pip install 'prana[otel]'`` (the docs'
    "Logs and traces" page) fetches the unrelated PyPI project the README warns about."""
    extras = set(importlib.metadata.metadata("prana-workflows").get_all("Provides-Extra") or [])
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").glob("*.py")]
    wrong: list[str] = []
    for page in pages:
        for line in page.read_text().splitlines():
            for target in re.findall(r"pip install (?:-[-\w]+ )*'?([\w.-]+)\[([\w,]+)\]", line):
                name, wanted = target
                if name not in ("prana-workflows", ".") or not set(wanted.split(",")) <= extras:
                    wrong.append(f"{page.relative_to(ROOT)}: {line.strip()}")
    assert wrong == []
