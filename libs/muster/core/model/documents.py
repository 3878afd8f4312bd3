"""YAML (or JSON) documents from text nobody vouches for, read within bounds.

Before anything is built, one pass over libyaml's event stream (flat, no recursion,
a fraction of the load's cost) counts documents, nesting and aliases: a document nested
deeper than ``MAX_DEPTH`` would otherwise exhaust the constructor's recursion (a 500
instead of a 4xx), and aliases of aliases ("billion laughs") grow exponentially once
built. Then libyaml's loader builds them (the pure-Python loader, where PyYAML was built
without libyaml, reads the same documents 3-4x slower).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64  # Kubernetes objects nest a dozen levels; kubectl refuses far less than 500
MAX_DOCUMENTS = 10_000
MAX_ALIASES = 100
FILE_DOCUMENTS = 10_000_000  # a local file the CLI reads (a trace): documents unbounded

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(ValueError):
    """The text is not YAML or JSON, or exceeds a bound: one line saying which."""


def load_documents(
    text: str | bytes,
    *,
    max_depth: int = MAX_DEPTH,
    max_documents: int = MAX_DOCUMENTS,
    max_aliases: int = MAX_ALIASES,
) -> list[Any]:
    """Every document of the text, empty ones as None (positions match ``doc[N]``)."""
    try:
        _check_bounds(text, max_depth, max_documents, max_aliases)
        return list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML or JSON: {_one_line(exc)}") from None
    except RecursionError:  # a bound above the interpreter's own: still a refusal
        raise DocumentError(f"nested too deeply (more than {max_depth} levels)") from None


def _check_bounds(text: str | bytes, max_depth: int, max_documents: int, max_aliases: int) -> None:
    depth = documents = aliases = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                at = f" at line {event.start_mark.line + 1}" if event.start_mark else ""
                raise DocumentError(f"nested too deeply: more than {max_depth} levels{at}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > max_documents:
                raise DocumentError(f"more than {max_documents} documents")
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > max_aliases:
                raise DocumentError(f"more than {max_aliases} aliases (*name)")


def _one_line(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())
