"""Import time: ``import prana`` and what a plain run imports, beside ``import tenacity``.

Each row is a whole Python process (``python -c CODE``), run ``--runs`` times with the rows
taking turns after one warm-up each; the figure is the median of the process's CPU time
(user + system, from ``os.wait4``), which a busy machine disturbs less than wall time.
The ratio is against ``import tenacity`` (``pip install -r bench/requirements.txt``).
Children run in the temporary directory, so the prana they import is the environment's
(``PYTHONPATH``), never one the current directory shadows it with.
``python -X importtime -c 'import prana'`` shows where a row's time goes.

Run: ``python bench/bench_import.py [--runs 21]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

PLAIN_RUN = (
    "from prana import Connection, Node, Registry, Workflow, execute_workflow\n"
    "registry = Registry()\n"
    "registry.register('t.ok', lambda params, ctx: 1)\n"
    "nodes = [Node(key='s', type='manual.trigger'), Node(key='a', type='t.ok')]\n"
    "edges = [Connection(from_node='s', to_node='a')]\n"
    "workflow = Workflow(id='w', nodes=nodes, connections=edges)\n"
    "execute_workflow(workflow, {'x': 1}, registry=registry)\n"
)
ROWS = {
    "python -c pass": "pass",
    "import tenacity": "import tenacity",
    "import prana": "import prana",
    "import prana, run a 2-node workflow": PLAIN_RUN,
}


def cpu_seconds(code: str) -> float:
    """The CPU time (user + system) of one ``python -c code`` process."""
    with subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tempfile.gettempdir(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as child:
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        error = child.stderr.read() if child.stderr else b""
    if child.returncode != 0:
        raise SystemExit(f"{code!r} failed: {error.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=21, help="processes per row (default 21)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    for code in ROWS.values():
        cpu_seconds(code)  # warm-up: bytecode caches written, files in the page cache
    for _ in range(args.runs):
        for name, code in ROWS.items():
            times[name].append(cpu_seconds(code))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["import tenacity"]
    print(
        f"import time, whole process, CPU median of {args.runs} (python {sys.version.split()[0]})"
    )
    print("| process | median CPU | x import tenacity |")
    print("|---|---|---|")
    for name, value in medians.items():
        print(f"| {name} | {value * 1e3:.1f} ms | {value / base:.2f}x |")


if __name__ == "__main__":
    main()
