"""The ``prana`` command: run workflow files, run a worker, inspect and steer executions.

Every command works on one store: a SQLite database (``--db``, default ``./prana.db``, or
``$PRANA_DB``) or PostgreSQL (``--postgres DSN`` or ``$PRANA_POSTGRES_DSN``). Every error
prints one line to stderr and exits with its documented code (``main``): 2 a mistake in the
command (a missing workflow file, bad JSON or YAML), 4 an unknown execution id, 5 a store
that cannot be used (no database there, a corrupt record); a run whose execution fails or
is cancelled exits with 1, Ctrl-C with 130 and SIGTERM with 143.

Each command lives in its own module of this package, exposing ``register(add)``; adding a
command is one module and one line in ``_COMMANDS``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sqlite3
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

from prana import PranaError
from scheduling import _ownership
from scheduling._cli import (
    completion,
    db,
    demo,
    lint,
    listing,
    redrive,
    run,
    schedule,
    serve,
    steer,
    worker,
    workflows,
)
from scheduling._cli._common import (
    DEFAULT_DB,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_TERMINATED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CLIError,
    load_actions,
    load_workflow_file,
    one_line,
    one_line_logging,
    store_warnings,
)
from scheduling._console import printable

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["CLIError", "load_actions", "load_workflow_file", "main"]

# The command modules, in the order `prana --help` lists them.
_COMMANDS = (
    run,
    worker,
    serve,
    listing,
    steer,
    redrive,
    workflows,
    schedule,
    lint,
    db,
    demo,
    completion,
)


class _Parser(argparse.ArgumentParser):
    """argparse with usage mistakes on one line: ``prana worker: error: ... (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """``--version``: what is installed, worked out only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(installed())
        parser.exit()


def installed() -> str:
    """The version, each store's schema version, and which extras' packages are importable."""
    import importlib.util

    import prana
    from scheduling.stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA

    lines = [f"prana {prana.__version__} (distribution {_ownership.DISTRIBUTION})"]
    schemas = f"schema version: SQLite {SQLITE_SCHEMA}"
    try:
        from scheduling.stores.postgres import SCHEMA_VERSION as POSTGRES_SCHEMA
    except ImportError:
        schemas += ", PostgreSQL (needs the postgres extra)"
    else:
        schemas += f", PostgreSQL {POSTGRES_SCHEMA}"
    lines.append(schemas)
    extras: dict[str, list[str]] = {}
    for module, extra in _EXTRAS.items():
        extras.setdefault(extra, []).append(module)
    for extra, modules in sorted(extras.items()):
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        said = "installed" if not missing else f"not installed (no {', '.join(missing)})"
        lines.append(f"  [{extra}] {said}")
    return "\n".join([*lines[:2], "extras:", *lines[2:]])


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="prana", description="Run workflows with retries that survive restarts.")
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version, the schema versions and which extras are installed, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, *, db_help: str | None = None) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--db", help=db_help or f"SQLite database (default ./{DEFAULT_DB} or $PRANA_DB)"
        )
        sub.add_argument(
            "--postgres",
            metavar="DSN",
            help="keep executions in PostgreSQL instead (or $PRANA_POSTGRES_DSN)",
        )
        sub.add_argument(
            "--schema", help="PostgreSQL schema for prana's tables (or $PRANA_POSTGRES_SCHEMA)"
        )
        return sub

    for command in _COMMANDS:
        command.register(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``prana`` command; returns its exit code.

    0 done; 1 the execution it ran failed or was cancelled (``lint``: it found warnings); 2
    a mistake in the command; 3
    refused by the execution's state; 4 no such execution; 5 the store cannot be used;
    130 interrupted; 143 terminated (SIGTERM). A reader that stops early (``| head``)
    changes none of this.
    """
    stdout = sys.stdout
    quiet = _QuietWhenReaderGone(stdout)
    sys.stdout = cast("TextIO", quiet)
    try:
        return _main(argv)
    finally:
        quiet.flush()
        sys.stdout = stdout


class _QuietWhenReaderGone:
    """stdout that goes quiet once its reader has gone (``prana run x.yaml | head -1``).

    A closed pipe must not stop a command halfway: a run keeps going to the end of its
    execution (rich would exit at the first line it cannot write, leaving the execution
    ``running`` until its lease ends), and a listing ends without a BrokenPipeError
    traceback. From the first write that finds the pipe closed, the output goes to
    ``os.devnull``; the exit code stays the command's own.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(argv: Sequence[str] | None) -> int:
    try:
        _ownership.check()
    except _ownership.ForeignSchedulingError as exc:
        print(f"prana: error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    args = _parser().parse_args(argv)
    logs = (
        one_line_logging(args.log_level, console=args.log_console)
        if hasattr(args, "log_level")
        else store_warnings()
    )
    try:
        with logs, _sigterm_raises():
            code: int = args.handler(args)
    except _TerminatedError:
        print("terminated (SIGTERM); suspended executions stay in the store for the next worker")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("interrupted; suspended executions stay in the store for the next worker")
        return EXIT_INTERRUPTED
    except ImportError as exc:
        print(f"prana: error: {one_line(exc)}{_extra_advice(exc)}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (PranaError, sqlite3.Error) as exc:
        print(f"prana: error: {printable(one_line(exc))}", file=sys.stderr)
        return exit_code_for(exc)
    return code


class _TerminatedError(BaseException):
    """Raised by the SIGTERM handler of ``_sigterm_raises``, as SIGINT raises KeyboardInterrupt."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While inside (in the main thread), SIGTERM raises ``_TerminatedError``, so a command
    stopped by it says so like Ctrl-C instead of dying silently; ``worker`` and ``serve``
    put their own graceful handler in its place while they run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: object) -> None:
        raise _TerminatedError

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_EXTRAS = {
    "procrastinate": "procrastinate",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "yaml": "yaml",
    "rich": "console",
    "starlette": "web",
    "uvicorn": "web",
    "httpx": "http",
    "opentelemetry": "otel",
    "shtab": "completion",
}
"""The extra of ``pyproject.toml`` that installs each optional top-level module."""


def _extra_advice(exc: ImportError) -> str:
    """'; install the extra it needs: pip install ...' naming the extra of the missing module.

    An import error whose module no extra provides gets no advice: naming an unrelated
    extra (the postgres one, said for a missing procrastinate) sends the user the wrong way.
    """
    name = exc.name
    if name is None:  # raised by hand, the module only in the message
        found = re.search(r"No module named '([\w.]+)'", str(exc))
        name = found.group(1) if found else ""
    extra = _EXTRAS.get(name.partition(".")[0])
    if extra is None:
        return ""
    return f"; install the extra it needs: pip install 'prana-workflows[{extra}]'"


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error a command ended with (see ``_common``)."""
    from prana import RecordError, ResumeError
    from scheduling._errors import (
        ExecutionNotFound,
        StaleVersionError,
        StoreError,
        WorkflowConflictError,
        WorkflowNotFound,
    )

    if isinstance(exc, CLIError):
        return exc.exit_code
    if isinstance(exc, ExecutionNotFound | WorkflowNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, ResumeError | StaleVersionError | WorkflowConflictError):
        return EXIT_REFUSED
    if isinstance(exc, StoreError | RecordError | sqlite3.Error):
        return EXIT_UNAVAILABLE
    return EXIT_USAGE
