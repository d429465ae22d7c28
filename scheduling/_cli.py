"""The ``prana`` command: run workflow files, run a worker, inspect and steer executions.

Every command works on one store: a SQLite database (``--db``, default ``./prana.db``, or
``$PRANA_DB``) or PostgreSQL (``--postgres DSN`` or ``$PRANA_POSTGRES_DSN``). Mistakes (a
missing file, bad JSON or YAML, an unknown execution id, a corrupt record) print one line
to stderr and exit with 2; a run whose execution fails or is cancelled exits with 1, and
Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import os
import sqlite3
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prana import ExecutionStatus, PranaError, Registry, Workflow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scheduling._console import ConsoleView
    from scheduling._runner import Runner
    from scheduling.abc import ExecutionStore

__all__ = ["CLIError", "load_actions", "load_workflow_file", "main"]

DEFAULT_DB = "prana.db"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
WORKER_POLL_SECONDS = 1.0
_PROCRASTINATE_NEEDS_POSTGRES = (
    "--scheduler procrastinate needs --postgres DSN (or $PRANA_POSTGRES_DSN)"
)


class CLIError(PranaError, ValueError):
    """A mistake on the command line; printed as one line, exit code 2."""


def _one_line(exc: BaseException) -> str:
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
    """Read a workflow from a ``.json``, ``.yaml`` or ``.yml`` file."""
    from prana import loads_workflow

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CLIError(f"{file}: no such file") from None
    except UnicodeDecodeError:
        raise CLIError(f"{file}: not UTF-8 text; save the workflow as UTF-8 JSON or YAML") from None
    except OSError as exc:
        raise CLIError(f"{file}: cannot read: {exc.strerror or exc}") from None
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:  # pragma: no cover - pyyaml ships with the cli extra
                raise CLIError(
                    f"{file}: reading YAML needs PyYAML: pip install 'prana[yaml]'"
                ) from None
            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise CLIError(f"{file}: not valid YAML: {_one_line(exc)}") from None
            if not isinstance(doc, dict):
                raise CLIError(f"{file}: a workflow is a YAML mapping, got {type(doc).__name__}")
            return loads_workflow(doc)
        return loads_workflow(text)
    except PranaError as exc:
        if isinstance(exc, CLIError):
            raise
        raise CLIError(f"{file}: {_one_line(exc)}") from None


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
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.is_file():
                raise CLIError(f"--actions {module_name}: no such file")
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
    except Exception as exc:  # noqa: BLE001 - any failure importing user code is reported
        raise CLIError(
            f"--actions {module_name}: cannot import: {type(exc).__name__}: {_one_line(exc)}"
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
                f"--actions {module_name}: register(registry) failed: {_one_line(exc)}"
            ) from None
        return registry
    raise CLIError(
        f"--actions {module_name}: the module has neither a `registry` (a prana.Registry) "
        "nor a `register(registry)` function"
    )


def _parse_json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{option}: not valid JSON: {exc}") from None


def _db_path(args: argparse.Namespace) -> str:
    db: str = args.db or os.environ.get("PRANA_DB") or DEFAULT_DB
    return db


def _postgres_dsn(args: argparse.Namespace) -> str | None:
    dsn: str | None = args.postgres or os.environ.get("PRANA_POSTGRES_DSN")
    return dsn


def _open_store(args: argparse.Namespace, *, must_exist: bool) -> ExecutionStore:
    """The store the command works on: PostgreSQL with ``--postgres``, else the SQLite file."""
    dsn = _postgres_dsn(args)
    if dsn is not None:
        from scheduling.stores.postgres import PostgresStore

        schema = args.schema or os.environ.get("PRANA_POSTGRES_SCHEMA")
        store = PostgresStore(dsn, schema=schema)
        try:
            store.setup()
        except Exception as exc:  # noqa: BLE001 - any driver error becomes one clear line
            store.close()
            raise CLIError(f"--postgres: cannot use the database: {_one_line(exc)}") from None
        return store
    from scheduling.stores.sqlite import SQLiteStore

    path = _db_path(args)
    if must_exist and path != ":memory:" and not Path(path).exists():
        raise CLIError(f"no database at {path}: run a workflow first, or pass --db PATH")
    try:
        return SQLiteStore(path)
    except sqlite3.Error as exc:
        raise CLIError(f"{path}: cannot open the database: {exc}") from None


def _runner(
    registry: Registry,
    store: ExecutionStore,
    view: ConsoleView | None,
    scheduler: Any = None,
) -> Runner:
    from scheduling._runner import Runner

    observers = [view] if view is not None else []
    return Runner(registry, store, scheduler, observers=observers)


# -- commands -----------------------------------------------------------------------------


def _finish(runner: Runner, execution_id: str, view: ConsoleView) -> int:
    """Wait until the execution ends or waits for the outside; print where it stands."""
    from scheduling._runner import is_settled

    execution = runner.wait(execution_id)
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        waiting_on = execution.suspension.kind
        print(
            f"execution {execution.id} waits on {waiting_on} at {execution.suspended_node}; "
            f"resume it with: prana deliver {execution.id} --data JSON --actions MODULE"
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


def _cmd_run(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    workflow = load_workflow_file(args.file)
    data = _parse_json(args.input, "--input") if args.input is not None else None
    registry = load_actions(args.actions)
    store = _open_store(args, must_exist=False)
    view = ConsoleView()
    try:
        with _runner(registry, store, view) as runner, view.live():
            execution_id = runner.start(workflow, data)
            return _finish(runner, execution_id, view)
    finally:
        store.close()


def _cmd_worker(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    if args.scheduler == "procrastinate" and _postgres_dsn(args) is None:
        raise CLIError(_PROCRASTINATE_NEEDS_POSTGRES)
    registry = load_actions(args.actions)
    store = _open_store(args, must_exist=False)
    view = ConsoleView()
    try:
        runner = _runner(registry, store, view)
        if args.once:
            handled = runner.run_due()
            print(f"resumed {len(handled)} due execution(s)")
            return EXIT_OK
        if args.scheduler == "procrastinate":
            return _procrastinate_worker(args, registry, store, view)
        stop = threading.Event()
        with runner, view.live():
            print(f"worker on {_where(args)}: resuming due executions (Ctrl-C to stop)")
            while not stop.wait(args.poll):
                runner.rearm_due()
    finally:
        store.close()
    return EXIT_OK  # pragma: no cover - the loop only ends by Ctrl-C


def _where(args: argparse.Namespace) -> str:
    return "PostgreSQL" if _postgres_dsn(args) is not None else _db_path(args)


def _procrastinate_worker(
    args: argparse.Namespace, registry: Registry, store: ExecutionStore, view: ConsoleView
) -> int:
    """One of several workers: alarms live in PostgreSQL (procrastinate), each fires once."""
    dsn = _postgres_dsn(args)
    if dsn is None:
        raise CLIError(_PROCRASTINATE_NEEDS_POSTGRES)
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

    scheduler = ProcrastinateScheduler(
        dsn, schema=args.schema or os.environ.get("PRANA_POSTGRES_SCHEMA"), run_in_thread=False
    )
    stop = threading.Event()
    with _runner(registry, store, view, scheduler) as runner, view.live():
        # Work another process left due without an alarm (a `prana run` killed in backoff)
        # is re-armed every --poll seconds, as the APScheduler worker does.
        rearm = threading.Thread(
            target=_rearm_until, args=(runner, stop, args.poll), name="prana-rearm", daemon=True
        )
        rearm.start()
        print("worker on PostgreSQL (procrastinate): resuming due executions (Ctrl-C to stop)")
        try:
            scheduler.run_worker()
        finally:
            stop.set()
            rearm.join(timeout=5)
    return EXIT_OK


def _rearm_until(runner: Runner, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        try:
            runner.rearm_due()
        except Exception:
            logging.getLogger("prana").exception("re-arming due executions failed")


def _cmd_list(args: argparse.Namespace) -> int:
    store = _open_store(args, must_exist=True)
    try:
        status = None
        if args.status is not None:
            try:
                status = ExecutionStatus(args.status)
            except ValueError:
                choices = ", ".join(s.value for s in ExecutionStatus)
                raise CLIError(f"--status {args.status}: use one of {choices}") from None
        rows = store.list(status, limit=args.limit)
    finally:
        store.close()
    if not rows:
        print("no executions")
        return EXIT_OK
    print(f"{'id':<34} {'workflow':<24} {'status':<10} {'due':<26} updated")
    for row in rows:
        workflow = f"{row.workflow_id} v{row.workflow_version}"
        due = row.due_at.isoformat() if row.due_at else "-"
        updated = row.updated_at.isoformat() if row.updated_at else "-"
        print(f"{row.id:<34} {workflow:<24} {row.status.value:<10} {due:<26} {updated}")
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from scheduling._console import format_timeline

    store = _open_store(args, must_exist=True)
    try:
        execution, version = store.load(args.id)
    finally:
        store.close()
    print(format_timeline(execution))
    print(f"  (record version {version})")
    return EXIT_OK


def _cmd_deliver(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    data = _parse_json(args.data, "--data")
    registry = load_actions(args.actions)
    store = _open_store(args, must_exist=True)
    view = ConsoleView()
    try:
        with _runner(registry, store, view) as runner, view.live():
            runner.deliver(args.id, data)
            return _finish(runner, args.id, view)
    finally:
        store.close()


def _cmd_cancel(args: argparse.Namespace) -> int:
    store = _open_store(args, must_exist=True)
    try:
        # The scheduler is never started: a worker's pending alarm finds it cancelled.
        registry = load_actions(args.actions)
        execution = _runner(registry, store, None).cancel(args.id, args.reason)
    finally:
        store.close()
    print(f"execution {execution.id}: {execution.status.value}")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from scheduling import _demo
    from scheduling._console import ConsoleView
    from scheduling.stores.memory import MemoryStore

    registry = Registry()
    _demo.register(registry)
    keep = args.db or os.environ.get("PRANA_DB") or _postgres_dsn(args)
    store: Any = _open_store(args, must_exist=False) if keep else MemoryStore()
    view = ConsoleView()
    print("prana demo: three calls to a flaky API, retried with exponential backoff")
    try:
        with _runner(registry, store, view) as runner, view.live():
            ids = [runner.start(_demo.workflow(), data) for data in _demo.DEMO_INPUTS]
            finals = [runner.wait(execution_id, timeout=60) for execution_id in ids]
    finally:
        store.close()
    print(view.summary())
    for execution in finals:
        print(f"execution {execution.id}: {execution.status.value}")
    return EXIT_OK


# -- the parser ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prana", description="Run workflows with retries that survive restarts."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--db", help=f"SQLite database (default ./{DEFAULT_DB} or $PRANA_DB)")
        sub.add_argument(
            "--postgres",
            metavar="DSN",
            help="keep executions in PostgreSQL instead (or $PRANA_POSTGRES_DSN)",
        )
        sub.add_argument(
            "--schema", help="PostgreSQL schema for prana's tables (or $PRANA_POSTGRES_SCHEMA)"
        )
        return sub

    run = add("run", "run a workflow file (JSON or YAML) until it ends or waits on a webhook")
    run.add_argument("file", help="the workflow definition, .json, .yaml or .yml")
    run.add_argument("--input", help="the workflow input, as JSON")
    run.add_argument("--actions", help="module (or .py file) registering your actions")
    run.set_defaults(handler=_cmd_run)

    worker = add("worker", "resume due executions until Ctrl-C")
    worker.add_argument("--actions", help="module (or .py file) registering your actions")
    worker.add_argument("--once", action="store_true", help="resume what is due now, then exit")
    worker.add_argument(
        "--poll",
        type=float,
        default=WORKER_POLL_SECONDS,
        help="seconds between checks for work left due by other processes (default 1)",
    )
    worker.add_argument(
        "--scheduler",
        choices=("apscheduler", "procrastinate"),
        default="apscheduler",
        help="procrastinate: several workers share alarms in PostgreSQL (needs --postgres)",
    )
    worker.set_defaults(handler=_cmd_worker)

    listing = add("list", "list executions, newest first")
    listing.add_argument(
        "--status",
        help="only executions with this status: pending, running, suspended, completed, "
        "failed or cancelled",
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.set_defaults(handler=_cmd_list)

    show = add("show", "show an execution's timeline: nodes, attempts, errors, delays, lateness")
    show.add_argument("id", help="the execution id")
    show.set_defaults(handler=_cmd_show)

    deliver = add("deliver", "deliver resume data to an execution waiting on a webhook")
    deliver.add_argument("id", help="the execution id")
    deliver.add_argument("--data", required=True, help="the resume data, as JSON")
    deliver.add_argument("--actions", help="module (or .py file) registering your actions")
    deliver.set_defaults(handler=_cmd_deliver)

    cancel = add("cancel", "cancel a suspended execution")
    cancel.add_argument("id", help="the execution id")
    cancel.add_argument("--reason", help="why (kept in the record)")
    cancel.add_argument(
        "--actions", help="module registering your actions (to resume a cancelled child's parent)"
    )
    cancel.set_defaults(handler=_cmd_cancel)

    demo = add("demo", "run the bundled demo: a flaky API retried with backoff")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``prana`` command; returns the exit code (0 ok, 1 run failed, 2 mistake)."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print("interrupted; suspended executions stay in the store for the next worker")
        return EXIT_INTERRUPTED
    except ImportError as exc:
        print(
            f"prana: error: {_one_line(exc)}; install the extra it needs, e.g. "
            "pip install 'prana[postgres]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except (PranaError, sqlite3.Error) as exc:
        print(f"prana: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
