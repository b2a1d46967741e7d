"""Errors raised by the mapping package.

    MappingError
    ├── QueueNameError       not a valid queue path name
    └── FormatNameError      not a valid MSMQ format name (MQ_ERROR_ILLEGAL_FORMATNAME)
"""

from __future__ import annotations

__all__ = ["MappingError", "QueueNameError", "FormatNameError"]


class MappingError(Exception):
    """Root of every error the mapping package raises on purpose."""


class QueueNameError(MappingError, ValueError):
    """Not a valid queue path name; the message says why."""


class FormatNameError(MappingError, ValueError):
    """Not a valid format name; the message says why (MSMQ: MQ_ERROR_ILLEGAL_FORMATNAME)."""

    code = "MQ_ERROR_ILLEGAL_FORMATNAME"
