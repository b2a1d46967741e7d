"""Queue path names (pure: no I/O). MS-MQMQ §2.1.1; docs/srmp.md, "Queue names
and URLs".

A path is ``name`` (public) or ``private$/name``, 1..124 characters of name, case-insensitive,
``/`` and ``\\`` equal. System queues use the machine forms ``system$;deadletter``,
``system$;deadxact``, ``system$;journal``; a queue's journal is ``<path>;journal``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mapping.errors import QueueNameError

__all__ = [
    "QueueNameError",
    "QueuePath",
    "parse_queue_path",
    "DEADLETTER",
    "DEADXACT",
    "MACHINE_JOURNAL",
    "ORDER_QUEUE",
    "SYSTEM_QUEUES",
    "journal_of",
]

NAME_CHARS_MAX = 124
# MS-MQMQ 2.1.1: %x21 / %x23-2A / %x2D-3A / %x3C-5B / %x5D-7F  (no space " + , ; \)
_ALLOWED = {0x21, *range(0x23, 0x2B), *range(0x2D, 0x3B), *range(0x3C, 0x5C),
            *range(0x5D, 0x80)}

DEADLETTER = "system$;deadletter"
DEADXACT = "system$;deadxact"
MACHINE_JOURNAL = "system$;journal"
ORDER_QUEUE = "private$/order_queue$"
SYSTEM_QUEUES = (DEADLETTER, DEADXACT, MACHINE_JOURNAL, ORDER_QUEUE)
_JOURNAL_SUFFIX = ";journal"


@dataclass(frozen=True, slots=True)
class QueuePath:
    """A normalised queue path: ``canonical`` is lower-case with ``/``; ``display`` keeps the
    case the queue was created with."""

    canonical: str
    display: str
    private: bool
    journal: bool
    system: bool


@functools.lru_cache(maxsize=4096)  # a request names its queue several times; bounded
def parse_queue_path(text: str) -> QueuePath:
    """Validate and normalise a queue path (the result is immutable, so cached).

    Raises:
        QueueNameError: empty, too long, a forbidden character, or an unknown form.
    """
    display = text.replace("\\", "/").lstrip("/")
    lowered = display.lower()
    if lowered in (DEADLETTER, DEADXACT, MACHINE_JOURNAL):
        return QueuePath(lowered, lowered, False, lowered == MACHINE_JOURNAL, True)
    journal = lowered.endswith(_JOURNAL_SUFFIX)
    base = display[: -len(_JOURNAL_SUFFIX)] if journal else display
    private = base.lower().startswith("private$/")
    name = base[len("private$/"):] if private else base
    if not name:
        raise QueueNameError(f"queue path {text!r} has no queue name")
    if name.lower() in ("private$", "system$"):
        raise QueueNameError(f"{name!r} is reserved and cannot name a queue")
    if "/" in name:
        raise QueueNameError(f"queue path {text!r}: a name is 'name' or 'private$/name'")
    if len(name) > NAME_CHARS_MAX:
        raise QueueNameError(f"queue name is {len(name)} characters; at most {NAME_CHARS_MAX}")
    bad = [c for c in name if ord(c) not in _ALLOWED]
    if bad:
        raise QueueNameError(f"queue name {name!r} has a character that is not allowed: "
                             f"{bad[0]!r} (no space, \" + , ; \\ or control characters)")
    canonical = ("private$/" if private else "") + name.lower() + (_JOURNAL_SUFFIX if journal
                                                                    else "")
    shown = ("private$/" if private else "") + name + (_JOURNAL_SUFFIX if journal else "")
    system = canonical == ORDER_QUEUE
    return QueuePath(canonical, shown, private, journal, system)


def journal_of(path: QueuePath) -> QueuePath:
    """The journal queue of ``path``."""
    assert not path.journal and not path.system
    return parse_queue_path(path.display + _JOURNAL_SUFFIX)
