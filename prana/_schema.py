"""Typed params: structure an action's rendered params into its declared attrs class."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

T = TypeVar("T")


@functools.cache
def _converter() -> Any:
    import cattrs

    return cattrs.Converter(forbid_extra_keys=True)


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
