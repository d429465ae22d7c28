"""What every ``prana`` command shares: errors, exit codes, loading files and opening stores."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import logging
import math
import os
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prana import ExecutionStatus, PranaError, RecordError, Registry, Workflow
from scheduling._cli._bounded import json_nesting_exceeds, load_yaml, nesting_error, read_bounded
from scheduling._console import printable

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scheduling._console import ConsoleView
    from scheduling._runner import Runner
    from scheduling.abc import ExecutionStore

DEFAULT_DB = "prana.db"
EXIT_OK = 0
"""The command did what it was asked (a run that waits on a webhook included)."""
EXIT_FAILED = 1
"""The execution the command ran (``run``, ``deliver``, ``redrive``) ended failed or cancelled;
``lint`` found warnings; ``worker --once`` left due executions it could not resume."""
EXIT_USAGE = 2
"""A mistake in the command: options, files, JSON, ``--actions``, an invalid workflow."""
EXIT_REFUSED = 3
"""Refused by the execution's state: delivering to a finished execution, cancelling one, a
concurrent change won (stale version), a conflicting workflow definition."""
EXIT_NOT_FOUND = 4
"""No execution (or workflow) with that id, or an id prefix that matches none."""
EXIT_UNAVAILABLE = 5
"""The store cannot be used: there is no database at ``--db`` (or no prana tables in the
PostgreSQL schema; a command that only reads or steers creates none), the database is
unreachable or unreadable (a corrupt record included), a driver (extra) is missing, its
schema is newer than this prana, or a foreign ``scheduling`` package is installed."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT)."""
EXIT_TERMINATED = 143
"""Stopped by SIGTERM (``worker`` and ``serve`` stop gracefully on it and exit 0)."""
WORKER_POLL_SECONDS = 1.0
LEASE_SECONDS = 30.0
MAX_SECONDS = 86_400.0
PROCRASTINATE_NEEDS_POSTGRES = (
    "--scheduler procrastinate needs --postgres DSN (or $PRANA_POSTGRES_DSN)"
)


class CLIError(PranaError, ValueError):
    """A mistake on the command line; printed as one line, exit code 2."""

    exit_code = EXIT_USAGE


class StoreUnavailableError(CLIError):
    """The store cannot be used (unreachable, unreadable, schema too new); exit code 5."""

    exit_code = EXIT_UNAVAILABLE


class RefusedError(CLIError):
    """Refused by what the store holds (a different definition under an id and version);
    exit code 3."""

    exit_code = EXIT_REFUSED


class NoSuchExecutionError(CLIError, LookupError):
    """No stored execution answers to the id (or id prefix) given; exit code 4."""

    exit_code = EXIT_NOT_FOUND


class AddCommand(Protocol):
    """Adds a subcommand with the store options every command takes; returns its parser."""

    def __call__(
        self, name: str, help_text: str, *, db_help: str | None = None
    ) -> argparse.ArgumentParser: ...


def one_line(exc: BaseException) -> str:
    """An error message on one line: a multi-line problem list is joined with ``; ``."""
    lines = [line.strip().removeprefix("- ") for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head, rest = lines[0], lines[1:]
    if rest:
        head = head.rstrip(":") + ": " + "; ".join(rest)
    return head


# -- loading ------------------------------------------------------------------------------


def load_workflow_file(path: str | os.PathLike[str]) -> Workflow:
    """Read a workflow from a ``.json``, ``.yaml`` or ``.yml`` file.

    The file is untrusted: it is read up to ``MAX_FILE_BYTES``, and refused when it nests
    deeper than ``MAX_NESTING`` levels or (YAML) expands its aliases without bound.
    """
    from prana import loads_workflow

    file = Path(path)
    try:
        text = read_bounded(file, str(file))
    except FileNotFoundError:
        raise CLIError(f"{file}: no such file") from None
    except UnicodeDecodeError:
        raise CLIError(f"{file}: not UTF-8 text; save the workflow as UTF-8 JSON or YAML") from None
    except OSError as exc:
        raise CLIError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:  # pragma: no cover - pyyaml ships with the cli extra
                raise CLIError(
                    f"{file}: reading YAML needs PyYAML: pip install 'prana-workflows[yaml]'"
                ) from None
            try:
                doc = load_yaml(text, str(file))
            except yaml.YAMLError as exc:
                raise CLIError(f"{file}: not valid YAML: {one_line(exc)}") from None
            except ValueError as exc:
                raise CLIError(str(exc)) from None
            if not isinstance(doc, dict):
                raise CLIError(f"{file}: a workflow is a YAML mapping, got {type(doc).__name__}")
            return loads_workflow(doc)
        if json_nesting_exceeds(text):
            raise CLIError(nesting_error(str(file)))
        return loads_workflow(text)
    except PranaError as exc:
        if isinstance(exc, CLIError):
            raise
        raise CLIError(f"{file}: {one_line(exc)}") from None


def load_workflow_source(path: str | os.PathLike[str]) -> Any:
    """The data a workflow file holds, as read (``None`` if it cannot be read again).

    ``prana lint`` passes it to ``lint(..., source=...)``: which design's form an unmarked
    retry mapping was read in is known only from the data. Call after
    ``load_workflow_file``, which has checked the file's size and nesting.
    """
    file = Path(path)
    try:
        text = read_bounded(file, str(file))
        if file.suffix.lower() in (".yaml", ".yml"):
            return load_yaml(text, str(file))
        return json.loads(text)
    except Exception:  # noqa: BLE001 - the workflow loaded; the source is a hint for lint
        return None


def load_actions(module_name: str | None) -> Registry:
    """The registry for a run: built-ins, plus what ``module_name`` registers.

    The module exposes ``registry`` (a ``prana.Registry``) or ``register(registry)``. A
    path to a ``.py`` file works too; the current directory is importable.
    """
    registry = Registry()
    if module_name is None:
        return registry
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    looks_like_path = module_name.endswith(".py") or os.sep in module_name or "/" in module_name
    try:
        if looks_like_path:
            file = Path(module_name)
            if not file.is_file():
                raise CLIError(
                    f"--actions {module_name}: no such file: {file} does not exist"
                    + ("" if file.suffix == ".py" else " (an actions file ends in .py)")
                )
            spec = importlib.util.spec_from_file_location(file.stem, file)
            if spec is None or spec.loader is None:
                raise CLIError(f"--actions {module_name}: cannot import this file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[file.stem] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except CLIError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0] and exc.name != module_name:
            raise CLIError(
                f"--actions {module_name}: cannot import: {type(exc).__name__}: {one_line(exc)}"
            ) from None
        raise CLIError(
            f"--actions {module_name}: cannot import: no module named {module_name!r}, and no "
            f"file {module_name}.py exists here; give a module on the path or a .py file"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure importing user code is reported
        raise CLIError(
            f"--actions {module_name}: cannot import: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    given = getattr(module, "registry", None)
    if isinstance(given, Registry):
        return given
    register = getattr(module, "register", None)
    if callable(register):
        try:
            register(registry)
        except Exception as exc:  # noqa: BLE001 - any failure in user code is reported
            raise CLIError(
                f"--actions {module_name}: register(registry) failed: {one_line(exc)}"
            ) from None
        return registry
    raise CLIError(
        f"--actions {module_name}: the module has neither a `registry` (a prana.Registry) "
        "nor a `register(registry)` function"
    )


def parse_json(text: str, option: str) -> Any:
    """``text`` parsed as JSON, or a one-line error naming ``option`` (also when too deep)."""
    if json_nesting_exceeds(text):
        raise CLIError(nesting_error(option))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{option}: not valid JSON: {exc}") from None


# -- stores and runners -------------------------------------------------------------------


def db_path(args: argparse.Namespace) -> str:
    """The SQLite file: ``--db``, else ``$PRANA_DB``, else ``./prana.db``."""
    db: str = args.db or os.environ.get("PRANA_DB") or DEFAULT_DB
    return db


def postgres_dsn(args: argparse.Namespace) -> str | None:
    """The PostgreSQL DSN from ``--postgres`` or ``$PRANA_POSTGRES_DSN``, if any."""
    dsn: str | None = args.postgres or os.environ.get("PRANA_POSTGRES_DSN")
    return dsn


def postgres_schema(args: argparse.Namespace) -> str | None:
    """The PostgreSQL schema from ``--schema`` or ``$PRANA_POSTGRES_SCHEMA``, if any."""
    schema: str | None = args.schema or os.environ.get("PRANA_POSTGRES_SCHEMA")
    return schema


def where(args: argparse.Namespace) -> str:
    """Where the store lives, for a worker's banner."""
    return "PostgreSQL" if postgres_dsn(args) is not None else db_path(args)


def open_store(
    args: argparse.Namespace, *, must_exist: bool, upgrade: bool = True
) -> ExecutionStore:
    """The store the command works on: PostgreSQL with ``--postgres``, else the SQLite file.

    Its schema is brought up to date (``upgrade``) or, with ``upgrade=False``, refused when
    behind; a schema newer than this prana is always refused (exit 5). ``must_exist``: a
    command that reads or steers stored executions refuses, creating nothing, a database
    that does not exist or holds no prana tables (``no_database``, exit 5).
    """
    dsn = postgres_dsn(args)
    if dsn is not None:
        from scheduling.stores.postgres import PostgresStore

        schema = postgres_schema(args)
        store = PostgresStore(dsn, schema=schema, upgrade=upgrade)
        try:
            missing = must_exist and store.stored_schema_version() is None
            if not missing:
                store.setup()
        except Exception as exc:  # noqa: BLE001 - any driver error becomes one clear line
            store.close()
            raise StoreUnavailableError(
                f"--postgres: cannot use the database: {one_line(exc)}"
            ) from None
        if missing:
            store.close()
            raise no_database(f"PostgreSQL schema {schema or 'public'}")
        return store
    from scheduling.stores.sqlite import SQLiteStore, stored_schema_version

    path = db_path(args)
    if must_exist and path != ":memory:":
        try:
            missing = stored_schema_version(path) is None
        except PranaError as exc:
            raise StoreUnavailableError(f"{path}: cannot open the database: {exc}") from None
        if missing:
            raise no_database(path)
    try:
        return SQLiteStore(path, upgrade=upgrade)
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"{path}: cannot open the database: {exc}") from None


def no_database(where: str) -> StoreUnavailableError:
    """The error for a command that needs stored executions where there is no database."""
    return StoreUnavailableError(
        f"no database at {where}: no prana tables there (nothing was created); run a "
        "workflow or `prana db upgrade` to create them, or pass --db PATH / --postgres DSN"
    )


def register_file(runner: Runner, workflow: Workflow, path: str) -> None:
    """Store ``workflow``, read from ``path``, as a definition.

    A different definition stored under its id and version is refused naming the file and
    the line to change: editing a workflow file and running it again is the usual way here,
    and the store's own message names the Python attribute (``Workflow.version``).
    """
    from scheduling._errors import WorkflowConflictError

    try:
        runner.register_workflow(workflow)
    except WorkflowConflictError:
        raise file_conflict(runner, workflow, path) from None


def file_conflict(runner: Runner, workflow: Workflow, path: str) -> RefusedError:
    """The refusal of ``workflow`` from ``path``: the store holds another definition under
    its id and version; it names the file and the version to write instead."""
    latest = runner.store.latest_workflow_version(workflow.id) or workflow.version
    return RefusedError(
        f"{path}: workflow {workflow.id!r} version {workflow.version} is already stored "
        "with a different definition, and a stored definition never changes (executions "
        f"refer to it by id and version): set `version: {latest + 1}` in {path}, or "
        "give the workflow a new id"
    )


def make_runner(
    registry: Registry,
    store: ExecutionStore,
    view: ConsoleView | None,
    scheduler: Any = None,
    *,
    recover: bool = False,
    lease_seconds: float = LEASE_SECONDS,
    max_interruptions: int = 3,
) -> Runner:
    """A runner over ``store`` that reports to ``view`` (if any).

    Only a worker passes ``recover=True``: a one-off command works on its own execution
    and never resumes others the store holds. ``lease_seconds`` is how long an execution
    this process runs stays its own should the process die (``--lease``).
    """
    from scheduling._runner import Runner

    observers = [view] if view is not None else []
    return Runner(
        registry,
        store,
        scheduler,
        observers=observers,
        recover=recover,
        lease_seconds=lease_seconds,
        max_interruptions=max_interruptions,
    )


LEASE_HELP = (
    "seconds an execution this process runs stays its own if the process dies (killed, "
    "cut off): then a worker takes it up and runs the interrupted attempt again (default 30)"
)


def add_lease(parser: argparse.ArgumentParser, help_text: str = LEASE_HELP) -> None:
    """Add ``--lease SECONDS`` to ``parser`` (checked by ``check_seconds``)."""
    parser.add_argument("--lease", type=float, default=LEASE_SECONDS, help=help_text)


def add_max_interruptions(parser: argparse.ArgumentParser) -> None:
    """Add ``--max-interruptions N`` (checked by ``check_max_interruptions``)."""
    parser.add_argument(
        "--max-interruptions",
        type=int,
        default=3,
        metavar="N",
        help="an attempt whose worker died inside it N times in a row fails instead of "
        "running again (default 3)",
    )


def check_max_interruptions(value: int) -> None:
    """Refuse a ``--max-interruptions`` outside 1..1,000,000, in one line."""
    if not 1 <= value <= 1_000_000:
        raise CLIError(f"--max-interruptions {value}: use a whole number from 1 to 1000000")


def check_seconds(option: str, value: float) -> None:
    """Refuse a number of seconds that is not > 0 and at most a day, in one line."""
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise CLIError(
            f"{option} {value!r}: use a number of seconds > 0 and <= {MAX_SECONDS:g} "
            f"(e.g. {option} 1.5)"
        )


def finish(runner: Runner, execution_id: str, view: ConsoleView) -> int:
    """Wait until the execution ends or waits for the outside; print where it stands."""
    from scheduling._runner import is_settled

    execution = runner.wait(execution_id)
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        waiting_on = execution.suspension.kind
        print(
            f"execution {execution.id} waits on {waiting_on} at {execution.suspended_node}; "
            f"resume it with: prana deliver {execution.id} --data JSON --actions MODULE"
        )
        path = runner.hook_path(execution.id)
        if path is not None:
            print(
                f"or over HTTP, once, to prana serve at its --host and --port (127.0.0.1:8000 "
                f"by default): curl -X POST -H 'Content-Type: application/json' -d JSON "
                f"http://127.0.0.1:8000{path}"
            )
    print(view.summary())
    print(f"execution {execution.id}: {execution.status.value}")
    if execution.status is ExecutionStatus.COMPLETED:
        print(json.dumps(execution.output, indent=2, default=str))
    assert is_settled(execution)
    return (
        EXIT_FAILED
        if execution.status
        in (
            ExecutionStatus.FAILED,
            ExecutionStatus.CANCELLED,
        )
        else EXIT_OK
    )


# -- logging ------------------------------------------------------------------------------


class OneLineFormatter(logging.Formatter):
    """Every record on one line: an exception is summarised as ``Type: message``, no traceback."""

    def format(self, record: logging.LogRecord) -> str:
        exc_info, record.exc_info, record.exc_text = record.exc_info, None, None
        try:
            text = super().format(record)
        finally:
            record.exc_info = exc_info
        if exc_info is not None and exc_info[1] is not None:
            text += f" ({type(exc_info[1]).__name__}: {one_line(exc_info[1])})"
        return printable(" ".join(text.split("\n")))


LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
"""The levels ``--log-level`` takes."""

_OWN_LOGGERS = ("prana", "scheduling")
"""prana's loggers: ``--log-level`` applies to them; other libraries log from WARNING."""


def add_logging(parser: argparse.ArgumentParser, *, console: bool) -> None:
    """Add ``--log-level`` and ``-v`` to a command that runs actions.

    ``console``: the command prints each event of its runs (the console view), so the
    event log (``scheduling.events``) keeps to what went wrong unless ``-v`` is given.
    """
    parser.add_argument(
        "--log-level",
        choices=tuple(LOG_LEVELS),
        default="info",
        help="what prana's own loggers (prana, scheduling.*) write to stderr, one line each "
        "(default info; other libraries: warning and above)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="debug",
        help="the same as --log-level debug: every event and every step of the runner",
    )
    parser.set_defaults(log_console=console)


@contextlib.contextmanager
def one_line_logging(level: str = "info", *, console: bool = False) -> Iterator[None]:
    """While inside, log to stderr one line per record: prana's own at ``level``, others
    from WARNING (APScheduler's per-job INFO lines stay out).

    The CLI's process is the application, so it configures logging, once per command;
    the libraries only attach ``NullHandler``s. With a console printing each event,
    ``scheduling.events`` keeps to WARNING and above unless ``level`` is debug. The
    connection pool's own per-connection warnings are raised to ERROR (the worker says
    what matters once). Everything is put back on the way out.
    """
    own = LOG_LEVELS[level]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    tuned = {
        name: logging.getLogger(name)
        for name in (*_OWN_LOGGERS, "scheduling.events", "psycopg.pool")
    }
    previous = root.level, {name: logger.level for name, logger in tuned.items()}
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    for name in _OWN_LOGGERS:
        tuned[name].setLevel(own)
    if console and own > logging.DEBUG:
        tuned["scheduling.events"].setLevel(max(own, logging.WARNING))
    if tuned["psycopg.pool"].level == logging.NOTSET:
        tuned["psycopg.pool"].setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous[0])
        for name, logger in tuned.items():
            logger.setLevel(previous[1][name])


@contextlib.contextmanager
def store_warnings() -> Iterator[None]:
    """While inside, the stores' warnings go to stderr as ``prana: warning: ...`` lines.

    For a command without ``--log-level`` (which configures no logging): opening a store
    may upgrade its schema, and the operator must see that it did (earlier releases can no
    longer use the database). Only ``scheduling.stores`` is shown; the handler is removed
    on the way out.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(OneLineFormatter("prana: warning: %(message)s"))
    stores = logging.getLogger("scheduling.stores")
    stores.addHandler(handler)
    try:
        yield
    finally:
        stores.removeHandler(handler)


PREFIX_SCAN_LIMIT = 100_000
"""How many stored executions an id prefix is matched against (newest first)."""


def matches(execution_id: str, given: str) -> bool:
    """Whether ``given`` names ``execution_id`` as the console prints ids.

    The console prints an id's first 12 characters, and a child run as its parent's short id
    followed by its own ``:node:run:attempt`` suffix; either form (or any longer prefix)
    names the execution. A child's id starts with its parent's, so a prefix without the
    suffix names only top-level executions: the parent's printed id is not ambiguous.
    """
    if execution_id.startswith(given):
        return ":" in given or ":" not in execution_id
    head, sep, rest = given.partition(":")
    if not sep:
        return False
    parent, psep, own = execution_id.partition(":")
    return bool(psep) and parent.startswith(head) and own == rest


def resolve_id(store: ExecutionStore, given: str) -> str:
    """The full id of the one execution ``given`` names: itself, or a unique prefix of it.

    ``NoSuchExecutionError`` when none matches; a ``CLIError`` listing a few candidates when the
    prefix is ambiguous.
    """
    from scheduling._errors import ExecutionNotFound, UnreadableRowsError

    try:
        store.load(given)
    except ExecutionNotFound:
        pass
    except RecordError:  # stored, but unreadable: the id is all this needs (a --after cursor)
        return given
    else:
        return given
    try:
        ids = [row.id for row in store.list(None, limit=PREFIX_SCAN_LIMIT)]
    except UnreadableRowsError as exc:  # a bad row still has an id to match
        ids = [row.id for row in exc.rows]
    found = [eid for eid in ids if matches(eid, given)]
    if not found:
        raise NoSuchExecutionError(
            f"no execution {given!r} is stored (and no stored id starts with it)"
        )
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise CLIError(
            f"id prefix {given!r} matches {len(found)} executions ({shown}); give more of the id"
        )
    return found[0]


def check_actions(workflows: Sequence[Workflow], registry: Registry, actions: str | None) -> None:
    """Refuse, before anything runs, workflows whose node types nobody registered.

    Without ``--actions`` the message says to pass it; with it, which types it lacks.
    """
    missing = sorted({n.type for wf in workflows for n in wf.nodes if n.type not in registry})
    if not missing:
        return
    from prana.shell import closest_types

    if "http.request" in missing:
        from prana.http import register_http

        try:
            register_http(Registry())  # raises, naming the extra, when httpx is missing
        except ModuleNotFoundError as exc:
            raise CLIError(str(exc)) from None

    types = ", ".join(repr(t) for t in missing)
    guesses = [
        f"{t!r} -> {' or '.join(repr(c) for c in close)}"
        for t in missing
        if (close := closest_types(t, registry))
    ]
    guess = f" (did you mean: {'; '.join(guesses)}?)" if guesses else ""
    if actions is None:
        raise CLIError(
            f"node type(s) {types} are not built in{guess}: pass --actions MODULE (a module "
            "or .py file that registers them)"
        )
    raise CLIError(f"--actions {actions} does not register the node type(s) {types}{guess}")


SUB_WORKFLOW_TYPE = "workflow.execute_workflow"


def check_children(workflows: Sequence[Workflow], store: ExecutionStore) -> None:
    """Refuse, before anything runs, a sub-workflow node naming a child nobody registered.

    A child named by a template is only known when the node runs, so it is not checked.
    """
    given = {(wf.id, wf.version) for wf in workflows} | {(wf.id, None) for wf in workflows}
    for wf in workflows:
        for node in wf.nodes:
            if node.type != SUB_WORKFLOW_TYPE or not isinstance(node.params, Mapping):
                continue
            child = node.params.get("workflow_id")
            version = node.params.get("version")
            if not isinstance(child, str) or "{{" in child:
                continue
            pinned = version if isinstance(version, int) else None
            if (child, pinned) in given:
                continue
            if pinned is None and store.latest_workflow_version(child) is not None:
                continue
            if pinned is not None and _has_version(store, child, pinned):
                continue
            what = f"{child!r}" + (f" version {pinned}" if pinned is not None else "")
            raise CLIError(
                f"workflow {wf.id!r} node {node.key!r} runs sub-workflow {what}, which is not "
                "registered: pass --workflow CHILD_FILE, or run `prana workflows add CHILD_FILE`"
            )


def _has_version(store: ExecutionStore, workflow_id: str, version: int) -> bool:
    from scheduling._errors import WorkflowNotFound

    try:
        store.load_workflow(workflow_id, version)
    except WorkflowNotFound:
        return False
    return True


def check_stored_actions(
    store: ExecutionStore,
    execution_id: str,
    registry: Registry,
    actions: str | None,
    *,
    when: ExecutionStatus,
) -> None:
    """``check_actions`` for a stored execution's workflow, if it is in the state ``when``.

    Only an execution the command would run is checked, so a refusal by state (a
    completed execution) still says so instead of asking for ``--actions``.
    """
    execution, _ = store.load(execution_id)
    if execution.status is when:
        workflow = store.load_workflow(execution.workflow_id, execution.workflow_version)
        check_actions([workflow], registry, actions)
