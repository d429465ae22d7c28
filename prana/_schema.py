"""Typed params: structure an action's rendered params into its declared attrs class."""

from __future__ import annotations

from typing import Any, TypeVar

import cattrs

T = TypeVar("T")

_converter = cattrs.Converter(forbid_extra_keys=True)


class ParamsInvalid(ValueError):  # noqa: N818 - reads as what happened
    """The rendered params do not fit the action's params schema."""


def structure_params(params: Any, schema: type[T]) -> T:
    """Structure ``params`` into ``schema``; a mismatch names every field that is wrong."""
    try:
        return _converter.structure(params, schema)
    except Exception as exc:  # noqa: BLE001 - cattrs raises class groups and plain errors
        if isinstance(exc, cattrs.BaseValidationError):
            lines = cattrs.transform_error(exc, path="params")
        else:
            lines = [f"params: {exc}"]
        raise ParamsInvalid(
            f"params do not fit {schema.__name__}: " + "; ".join(lines)
        ) from None
