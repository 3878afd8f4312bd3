"""structlog JSON logs on stderr, configured once at a service's start.

Every line a service writes to stderr is one JSON object: its own structlog events, and
the standard library's records (aiokafka, aiohttp, asyncio, SQLAlchemy, warnings) rendered
by the same processors through structlog's ``ProcessorFormatter``.
"""

from __future__ import annotations

import logging
import sys
from types import TracebackType
from typing import Any

import structlog
from structlog.typing import Processor


def _shared(service: str) -> list[Processor]:
    """What every line carries: the bound context, ``service`` (also on lines from threads,
    such as aiosqlite's, which do not see the context), level and UTC time."""

    def add_service(_: Any, __: str, event: structlog.typing.EventDict) -> Any:
        event.setdefault("service", service)
        return event

    return [
        structlog.contextvars.merge_contextvars,
        add_service,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def json_formatter(service: str) -> structlog.stdlib.ProcessorFormatter:
    """A stdlib ``logging.Formatter`` writing a record as the JSON line structlog would:
    ``event`` (the message, %-args applied), ``logger`` (the record's logger name),
    ``level``, ``timestamp``, the bound context and ``exception`` for a traceback."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared(service), structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )


def configure(service: str, level: str = "info") -> structlog.stdlib.BoundLogger:
    numeric = getattr(logging, level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter(service))
    root = logging.getLogger()
    # Replace, not add to, whatever handlers were there (basicConfig's plain text ones).
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)  # warnings.warn goes through logging ("py.warnings")
    structlog.configure(
        processors=[
            *_shared(service),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    sys.excepthook = _log_uncaught
    return structlog.get_logger(service)


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
    """A crash's traceback as one JSON line too, instead of Python's plain text."""
    if issubclass(kind, KeyboardInterrupt):
        return sys.__excepthook__(kind, exc, tb)
    logging.getLogger("muster").critical("uncaught exception", exc_info=(kind, exc, tb))
    return None
