"""Compile a workflow once into an execution graph, validating everything on the way.

Validation collects every problem before raising, so a user fixes a workflow in one pass.
Compiled graphs are cached per (workflow object, registry generation): running the same
workflow again costs a dictionary lookup.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prana._decision import check_conditions
from prana._errors import InvalidWorkflowError
from prana._jsoncheck import MAX_INT, MIN_INT, json_size, jsonable
from prana._model import Connection, Node, Workflow
from prana._policy import RetryPolicy
from prana._registry import ActionSpec, Registry
from prana._resolve import attempt_timeout
from prana._resolve import resolve as resolve_policies

if TYPE_CHECKING:
    from prana._templates import CompiledParams


class CompiledNode:
    """A node with everything the executor needs precomputed."""

    __slots__ = (
        "checks_results",
        "counts_timeouts",
        "in_ports",
        "key",
        "max_attempts",
        "node",
        "outgoing",
        "params_size",
        "params_template",
        "plain_params",
        "policies",
        "spec",
        "timeout",
    )

    def __init__(self, node: Node, spec: ActionSpec, workflow: Workflow) -> None:
        self.key = node.key
        self.node = node
        self.spec = spec
        self.params_template: CompiledParams | None = _compile_params(node.params)
        self.plain_params = self.params_template is None and spec.params is None
        """Params go to the action as written: no template to render, no schema."""
        self.params_size = 0 if self.params_template is not None else _kept_size(node.params)
        """The size of params recorded as written (``Limits``), counted once here."""
        self.outgoing: dict[str, list[tuple[str, str]]] = {}
        self.in_ports: dict[str, list[tuple[str, str]]] = {}
        self.policies: tuple[RetryPolicy, ...] = resolve_policies(node, workflow, spec.retry)
        self.checks_results = any(p.retry_on_result is not None for p in self.policies)
        self.counts_timeouts = any(p.timeout_retries is not None for p in self.policies)
        """A policy retries timeouts on their own budget: the engine counts them."""
        first = self.policies[0] if self.policies else None
        self.max_attempts = (first.max_attempts if first.enabled else 1) if first else 1
        """The attempts the node's first policy allows (events say it; ``None``: unlimited)."""
        """A policy may turn a successful output into a failed attempt (``retry_on_result``)."""
        policy_timeout = attempt_timeout(self.policies)
        self.timeout = policy_timeout if policy_timeout is not None else node.settings.timeout


def _has_template(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_has_template(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_template(v) for v in value)
    return False


def _kept_size(params: Any) -> int:
    if not params:
        return 0
    size = json_size(params)
    return size if size >= 0 else max(json_size(jsonable(params)), 0)


def _compile_params(params: Any) -> CompiledParams | None:
    """Compile templated params; Jinja is only imported by workflows that use templates."""
    if not _has_template(params):
        return None
    from prana._templates import compile_params

    return compile_params(params)


class CompiledGraph:
    """The validated, indexed form of a workflow for one registry."""

    __slots__ = ("__weakref__", "_feeds", "nodes", "successors", "trigger", "workflow")

    def __init__(self, workflow: Workflow, nodes: dict[str, CompiledNode], trigger: str) -> None:
        self.workflow = workflow
        self.nodes = nodes
        self.trigger = trigger
        self.successors: dict[str, frozenset[str]] = {
            key: frozenset(to for targets in cn.outgoing.values() for to, _ in targets)
            for key, cn in nodes.items()
        }
        self._feeds: dict[str, tuple[tuple[str, str], ...]] | None = None

    def join_feeds(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """For each node X, the AND-join ports ``(join, port)`` that X can still feed.

        X feeds port P of a join J (a node with several input ports) when a path leads
        from X (included) to a source of P without passing through J. While such an X is
        pending, P may still receive data, so J waits for it; this is the readiness rule
        of ``reachable_from``, precomputed once per graph (a backward walk per join port)
        so the executor counts live feeders instead of walking the graph at every pick.
        Empty when the workflow has no AND-join.
        """
        feeds = self._feeds
        if feeds is not None:
            return feeds
        predecessors: dict[str, set[str]] = {key: set() for key in self.nodes}
        for key, targets in self.successors.items():
            for target in targets:
                predecessors[target].add(key)
        found: dict[str, list[tuple[str, str]]] = {}
        for join, cn in self.nodes.items():
            if len(cn.in_ports) <= 1:
                continue
            for port, sources in cn.in_ports.items():
                stack = [src for src, _ in sources if src != join]
                seen: set[str] = set()
                while stack:
                    key = stack.pop()
                    if key in seen:
                        continue
                    seen.add(key)
                    stack.extend(n for n in predecessors[key] if n != join and n not in seen)
                for key in seen:
                    found.setdefault(key, []).append((join, port))
        feeds = self._feeds = {key: tuple(pairs) for key, pairs in found.items()}
        return feeds

    def reachable_from(self, starts: Iterable[str], avoid: str) -> set[str]:
        """Every node reachable from ``starts`` (included) without passing through ``avoid``."""
        seen: set[str] = set()
        stack = [s for s in starts if s != avoid]
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            seen.add(key)
            stack.extend(n for n in self.successors[key] if n != avoid and n not in seen)
        return seen


_CACHE: dict[int, tuple[weakref.ref[Workflow], weakref.ref[Registry], int, CompiledGraph]] = {}


def compile_workflow(workflow: Workflow, registry: Registry) -> CompiledGraph:
    """Validate ``workflow`` against ``registry`` and index it; raises ``InvalidWorkflowError``."""
    cached = _CACHE.get(id(workflow))
    if cached is not None:
        wf_ref, reg_ref, generation, graph = cached
        if wf_ref() is workflow and reg_ref() is registry and generation == registry.generation:
            return graph
    graph = _compile(workflow, registry)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[id(workflow)] = (
        weakref.ref(workflow),
        weakref.ref(registry),
        registry.generation,
        graph,
    )
    return graph


def _compile(workflow: Workflow, registry: Registry) -> CompiledGraph:
    problems: list[str] = []
    if not isinstance(workflow, Workflow):
        raise InvalidWorkflowError([f"expected a prana.Workflow, got {type(workflow).__name__}"])
    nodes: dict[str, CompiledNode] = {}
    triggers: list[str] = []
    for index, node in enumerate(workflow.nodes):
        if not isinstance(node, Node):
            problems.append(f"nodes[{index}]: expected a prana.Node, got {type(node).__name__}")
            continue
        if node.key in nodes:
            problems.append(
                f"node {node.key!r}: duplicate key (nodes[{index}]); keys must be unique"
            )
            continue
        spec = registry.get(node.type)
        if spec is None:
            problems.append(unknown_type_message(node, registry))
            continue
        try:
            compiled = nodes[node.key] = CompiledNode(node, spec, workflow)
        except ValueError as exc:
            problems.append(f"node {node.key!r}: {exc}")
            continue
        compiled.policies, found = check_conditions(node, workflow, spec.retry, registry)
        problems.extend(f"node {node.key!r}: {problem}" for problem in found)
        found = storable_policy_problems("settings.retry", node.settings.retry)
        found += storable_int_problems("params", node.params)
        problems.extend(f"node {node.key!r}: {problem}" for problem in found)
        if spec.trigger:
            triggers.append(node.key)
    for node_type, defaults in workflow.retry_defaults.items():
        problems.extend(storable_policy_problems(f"retry_defaults[{node_type!r}]", defaults))
    problems.extend(storable_int_problems("variables", workflow.variables))
    known_keys = {n.key for n in workflow.nodes if isinstance(n, Node)}
    for index, conn in enumerate(workflow.connections):
        if not isinstance(conn, Connection):
            problems.append(
                f"connections[{index}]: expected a prana.Connection, got {type(conn).__name__}"
            )
            continue
        label = (
            f"connection[{index}] {conn.from_node}.{conn.from_port} -> "
            f"{conn.to_node}.{conn.to_port}"
        )
        bad = False
        for end in (conn.from_node, conn.to_node):
            if end not in known_keys:
                problems.append(f"{label}: unknown node {end!r}")
                bad = True
        if bad:
            continue
        source = nodes.get(conn.from_node)
        target = nodes.get(conn.to_node)
        if source is None or target is None:
            continue  # the node itself was already reported
        ports = source.spec.output_ports
        if ports is not None and conn.from_port not in ports and conn.from_port != "error":
            problems.append(
                f"{label}: {source.spec.type!r} has no output port {conn.from_port!r} "
                f"(its ports: {', '.join(ports)}, and 'error' for on_error=continue_error_output)"
            )
            continue
        if target.spec.trigger:
            problems.append(
                f"{label}: a trigger node ({conn.to_node!r}) takes no incoming connection"
            )
            continue
        source.outgoing.setdefault(conn.from_port, []).append((conn.to_node, conn.to_port))
        target.in_ports.setdefault(conn.to_port, []).append((conn.from_node, conn.from_port))
    if not triggers and not any(
        (spec := registry.get(n.type)) is not None and spec.trigger
        for n in workflow.nodes
        if isinstance(n, Node)
    ):
        problems.append(
            "workflow has no trigger node; add one, e.g. Node(key='start', type='manual.trigger')"
        )
    elif len(triggers) > 1:
        problems.append(
            f"workflow has {len(triggers)} trigger nodes ({', '.join(map(repr, triggers))}); "
            "keep exactly one"
        )
    if problems:
        raise InvalidWorkflowError(problems)
    return CompiledGraph(workflow, nodes, triggers[0])


def storable_int_problems(where: str, value: Any) -> list[str]:
    """The integers in ``value`` (params, variables) a stored definition cannot hold.

    A workflow file may hold any integer (YAML reads ``10**30`` exactly), but the
    definition is saved before anything runs, and its serializer writes integers from
    ``MIN_INT`` to ``MAX_INT`` only: refused here, naming the field, rather than at the
    save ("Integer exceeds 64-bit range"). Other values are left to the node's action.
    """
    problems: list[str] = []
    stack: list[tuple[str, Any]] = [(where, value)]
    seen: set[int] = set()  # containers walked (a Python caller's params may hold a cycle)
    while stack and len(problems) < 10:
        path, item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, Mapping | list | tuple):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, int) and not MIN_INT <= item <= MAX_INT:
            problems.append(
                f"{path}: an integer of {item.bit_length()} bits is outside the range a "
                "stored definition holds (-2**63 to 2**64 - 1); write it as a string"
            )
        elif isinstance(item, Mapping):
            stack.extend((f"{path}.{key}", inner) for key, inner in reversed(list(item.items())))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", inner) for i, inner in reversed(list(enumerate(item))))
    return problems


def storable_policy_problems(where: str, policies: Iterable[RetryPolicy] | None) -> list[str]:
    """The policy fields a stored definition cannot hold: ``max_attempts`` past ``MAX_INT``.

    A policy takes any whole number of attempts (``Limits.max_attempts`` caps what runs),
    but the definition is saved before anything runs, and its serializer writes integers
    up to ``MAX_INT`` only: refused here, naming the field, rather than at the save.
    """
    policies = tuple(policies or ())
    return [
        f"{where}{f'[{index}]' if len(policies) > 1 else ''}.max_attempts="
        f"{policy.max_attempts}: use a whole number from 1 to {MAX_INT:,} (the most a "
        "stored definition holds; Limits.max_attempts caps the attempts that run)"
        for index, policy in enumerate(policies)
        if isinstance(policy, RetryPolicy)
        and policy.max_attempts is not None
        and policy.max_attempts > MAX_INT
    ]


def closest_types(name: str, registry: Registry) -> list[str]:
    """The registered (and built-in) action types closest to ``name``, best first."""
    import difflib  # only for a mistake's suggestion

    return difflib.get_close_matches(name, registry.types(), n=3, cutoff=0.6)


def unknown_type_message(node: Node, registry: Registry) -> str:
    """Why ``node``'s type is refused: the closest known types, and how to register one."""
    close = closest_types(node.type, registry)
    guess = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return (
        f"node {node.key!r}: unknown action type {node.type!r}{guess}; register it with "
        f"registry.register({node.type!r}, fn), or with the prana command pass --actions "
        f"MODULE that registers it (known: {_short_list(registry.types())})"
    )


def _short_list(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def validate(workflow: Workflow, registry: Registry | None = None) -> None:
    """Raise ``InvalidWorkflowError`` listing every problem; return quietly if there is none."""
    compile_workflow(workflow, registry if registry is not None else Registry())
