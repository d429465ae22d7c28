"""Built-in actions (placeholder: only the manual trigger until the built-ins land)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prana._registry import ActionContext, Registry


def _manual_trigger(params: Any, ctx: ActionContext) -> Any:
    """Emit the workflow input on ``main``."""
    del params
    return ctx.input.get("main")


def register_builtins(registry: Registry) -> None:
    """Register every built-in action on ``registry``."""
    registry.register("manual.trigger", _manual_trigger, trigger=True)
