"""What a node's params see: the template scope, and the params rendered from it.

``template_scope`` builds ``$input``, ``$nodes``, ``$vars``, ``$env``, ``$execution``,
``$workflow``, ``$now`` and ``$webhooks`` for one attempt; ``prepare_params`` renders the
node's params templates with it and structures them into the action's schema. Both read
the engine's working copy (``prana._engine.Run``) and never change what a template sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prana._graph import CompiledNode
from prana._hooks import (
    HOOK_PATH_PREFIX,
    NO_TOKENS,
    PENDING_TOKEN_PREFIX,
    mint_token,
    redact_tokens,
    token_digest,
)
from prana._jsoncheck import ScopeView, json_problem, json_size, jsonable, shared_json
from prana._model import ErrorCode, ErrorInfo, NodeExecution
from prana._noderun import NodeRun, prana_error
from prana._registry import ActionContext
from prana._schema import structure_params

if TYPE_CHECKING:
    from prana._engine import Run


class _NodesView(ScopeView, Mapping[str, Any]):
    """``$nodes`` for templates: each node's latest run, computed only when looked at."""

    __slots__ = ("_runs",)
    root = "$nodes"

    def __init__(self, runs: Mapping[str, Sequence[NodeExecution]]) -> None:
        self._runs = runs

    def __getitem__(self, key: str) -> Any:
        runs = self._runs.get(key)
        if not runs:
            raise KeyError(key)
        last = runs[-1]
        return {
            "output": last.output,
            "port": last.output_port,
            "status": last.status.value,
            "run_index": last.run_index,
        }

    def __iter__(self) -> Any:
        return (k for k, v in self._runs.items() if v)

    def __len__(self) -> int:
        return sum(1 for v in self._runs.values() if v)


class _WebhooksView(ScopeView, Mapping[str, str]):
    """``$webhooks`` for templates: ``$webhooks.<wait node>`` is that wait's resume path.

    Looking one up mints the token of the node's next webhook wait: its digest waits in
    the shared state (``__webhook__:<key>``) for the wait to take it, the plaintext stays
    in memory, and the executor redacts it from the params and output it records.
    """

    __slots__ = ("_paths", "_run")
    root = "$webhooks"

    def __init__(self, run: Run) -> None:
        self._run = run
        self._paths: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        path = self._paths.get(key)
        if path is not None:
            return path
        run = self._run
        if key not in run.graph.nodes:
            raise KeyError(key)
        token, secret = mint_token(run.id)
        run.state[PENDING_TOKEN_PREFIX + key] = token_digest(run.id, key, secret)
        if run.issued is NO_TOKENS:  # the shared empty dict is never written
            run.issued = {}
        run.issued[key] = token
        path = self._paths[key] = HOOK_PATH_PREFIX + token
        return path

    def __iter__(self) -> Any:
        return iter(self._run.graph.nodes)

    def __len__(self) -> int:
        return len(self._run.graph.nodes)


def prepare_params(
    run: Run, cn: CompiledNode, node_run: NodeRun, ctx: ActionContext, *, count: bool = True
) -> tuple[Any, ErrorInfo | None]:
    """Render the params' templates and structure them into the action's schema.

    The record keeps the rendered params sharing what they name (``shared_json``: nothing
    is copied), and, when ``count`` (the node run is not in the record yet), their size is counted
    against the application's ``Limits`` before the action runs.
    """
    params: Any = cn.node.params
    template = cn.params_template
    if template is not None:
        # Plain paths over $input/$vars are walked without building the scope; any miss
        # renders as usual (the rule: ``CompiledParams.walk``).
        rendered = template.walk(ctx.input, run.variables) if template.walks else None
        if rendered is None:
            from prana._templates import TemplateError

            try:
                rendered = template.render(template_scope(run, ctx))
            except TemplateError as exc:
                message = f"params.{exc.path}: {exc.message}"
                return None, prana_error(ErrorCode.TEMPLATE_ERROR, message, cn.key, "TemplateError")
        params, size = shared_json(rendered)
        recorded = params
        if size < 0:  # a tuple, a mapping that is not a dict, an object from $env...
            recorded = jsonable(params)
            # A value the record cannot hold (a 65-bit int, a lone surrogate) fails here,
            # before the action runs, rather than at the save after it.
            problem = json_problem(recorded)
            if problem is not None:
                message = f"params{problem[1:]}"
                return None, prana_error(ErrorCode.TEMPLATE_ERROR, message, cn.key, "TemplateError")
            size = json_size(recorded)
        node_run.params = recorded
        if run.issued:
            node_run.params = redact_tokens(node_run.params, run.issued)
    else:
        node_run.params = params
        size = cn.params_size
    if count and size and node_run.params:  # no params (None, {}) count nothing
        limit_problem = run.keep(cn.key, "its params", size)
        if limit_problem is not None:
            return None, limit_problem
    schema = cn.spec.params
    if schema is not None:
        try:
            params = structure_params(params, schema)
        except ValueError as exc:
            return None, prana_error(ErrorCode.PARAMS_INVALID, str(exc), cn.key, "ParamsInvalid")
    return params, None


def template_scope(run: Run, ctx: ActionContext) -> dict[str, Any]:
    """The names a node's params templates see (docs: Templates)."""
    workflow = run.workflow
    return {
        "input": ctx.input,
        "nodes": _NodesView(run.runs),
        "vars": workflow.variables,
        "env": run.env,
        "execution": {
            "id": run.id,
            "state": run.state,
            "run_index": ctx.run_index,
            "attempt": ctx.attempt,
            "workflow_id": workflow.id,
        },
        "workflow": {"id": workflow.id, "name": workflow.name, "version": workflow.version},
        "now": ctx.now,
        "webhooks": _WebhooksView(run),
        "secrets": run.secrets,
    }
