"""Reading untrusted command-line input within bounds: file size, nesting, YAML expansion.

A workflow file, ``--input`` and ``--data`` come from whoever runs the command (or wrote the
file). Each is refused in one line when it is larger, deeper or expands further than any
real workflow or payload does, before a parser recurses, allocates or walks without bound.
"""

from __future__ import annotations

import io
import sys
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
        """``SafeLoader`` that stops composing past ``MAX_NESTING`` levels, and names the
        field of an integer too long for Python to read."""

        depth = 0
        root: Any = None

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_NESTING:
                    raise ValueError(nesting_error(what))
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_document(self, node: Any) -> Any:
            self.root = node
            return super().construct_document(node)

        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except ValueError:  # longer than sys.get_int_max_str_digits()
                raise ValueError(_long_integer(what, self.root, node)) from None

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)

    stream = io.StringIO(text)
    stream.name = what  # YAML's error marks name the file, not "<unicode string>"
    doc = yaml.load(stream, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    _check_expansion(doc, what)
    return doc


def _long_integer(what: str, root: Any, bad: Any) -> str:
    """The one-line error for the YAML integer node ``bad``: file, field path, line, length."""
    digits = sum(char.isdigit() for char in bad.value)
    mark = bad.start_mark
    return (
        f"{what}: {_path_to(root, bad)} (line {mark.line + 1}, column {mark.column + 1}): "
        f"an integer of {digits} digits; at most {sys.get_int_max_str_digits()} digits are "
        "read, and no field of a workflow takes a number that long"
    )


def _path_to(root: Any, wanted: Any) -> str:
    """Where ``wanted`` sits in the composed YAML tree under ``root``, as ``$.a[1].b``.

    Each node is visited once (aliases share nodes), so the walk is bounded by the text.
    """
    import yaml

    seen: set[int] = set()
    pending: list[tuple[Any, str]] = [(root, "$")]
    while pending:
        node, path = pending.pop()
        if node is wanted:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                pending.append((key, f"{path} (a key)"))
                pending.append((value, f"{path}.{name}"))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return "$"


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
