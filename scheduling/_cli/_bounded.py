"""Reading untrusted command-line input within bounds: file size, nesting, YAML expansion.

A workflow file, ``--input`` and ``--data`` come from whoever runs the command (or wrote the
file). Each is refused in one line when it is larger, deeper or expands further than any
real workflow or payload does, before a parser recurses, allocates or walks without bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest workflow file read (10 MiB); larger ones (or ``/dev/zero``) are refused."""

MAX_NESTING = 100
"""How deep lists and mappings may nest in a workflow file, ``--input`` or ``--data``.

Well below what the serializer accepts (orjson stops at 254 levels, and an execution
nests its input a few levels down), so what is accepted here can also be stored.
"""

MAX_YAML_VALUES = 100_000
"""How many values a YAML document may hold once its aliases are expanded."""


def read_bounded(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``, reading at most ``MAX_FILE_BYTES`` (+1 to tell)."""
    with path.open("rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"{what}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; a workflow file is "
            "a small JSON or YAML definition"
        )
    return data.decode("utf-8")


def nesting_error(what: str) -> str:
    return (
        f"{what}: nested deeper than {MAX_NESTING} levels of lists and mappings; flatten the data"
    )


def json_nesting_exceeds(text: str) -> bool:
    """Whether JSON ``text`` nests lists and objects deeper than ``MAX_NESTING``.

    One pass over the characters, skipping strings; it never recurses, so it is safe on
    any input (malformed text is left to the parser to report).
    """
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return True
        elif char in "]}":
            depth -= 1
    return False


def load_yaml(text: str, what: str) -> Any:
    """``text`` as YAML (safe types only), refused when too deep or when aliases expand too far.

    Raises ``ValueError`` with a one-line message; ``yaml.YAMLError`` for malformed text.
    """
    import yaml

    class Loader(yaml.SafeLoader):
        """``SafeLoader`` that stops composing past ``MAX_NESTING`` levels."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_NESTING:
                    raise ValueError(nesting_error(what))
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    doc = yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    _check_expansion(doc, what)
    return doc


def _check_expansion(doc: Any, what: str) -> None:
    """Refuse a document that holds more than ``MAX_YAML_VALUES`` values, aliases expanded.

    Aliases share objects, so a few lines can stand for billions of values that anything
    walking the document would visit; the walk here stops as soon as it has seen too many.
    """
    seen = 0
    pending = [doc]
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise ValueError(
                f"{what}: holds more than {MAX_YAML_VALUES} values once its aliases are "
                "expanded; write the workflow out without nested aliases"
            )
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
