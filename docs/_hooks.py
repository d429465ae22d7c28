"""MkDocs hooks: reference tables generated from the code, so the docs cannot drift from it."""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each ``<!-- prana:NAME -->`` marker with the table generated for NAME."""
    del kwargs
    return markdown
