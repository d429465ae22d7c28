"""Typed params: structure an action's rendered params into its declared attrs class."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


@functools.cache
def _converter() -> Any:
    import cattrs

    converter = cattrs.Converter(forbid_extra_keys=True)
    # rendered params are JSON data: a datetime field arrives as ISO text (``{{ $now }}``)
    converter.register_structure_hook(datetime, _structure_datetime)
    return converter


def _structure_datetime(value: Any, _: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    raise TypeError(f"expected an ISO 8601 datetime, got {type(value).__name__}")


class ParamsInvalid(ValueError):  # noqa: N818 - reads as what happened
    """The rendered params do not fit the action's params schema."""


def structure_params(params: Any, schema: type[T]) -> T:
    """Structure ``params`` into ``schema``; a mismatch names every field that is wrong."""
    import cattrs

    try:
        result: T = _converter().structure(params, schema)
        return result
    except Exception as exc:  # noqa: BLE001 - cattrs raises class groups and plain errors
        if isinstance(exc, cattrs.BaseValidationError):
            lines = cattrs.transform_error(exc, path="params")
        else:
            lines = [f"params: {exc}"]
        raise ParamsInvalid(f"params do not fit {schema.__name__}: " + "; ".join(lines)) from None
