"""What a client may set on a queue, and how it is kept in the queue's registration file."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QueueSettings"]


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What a client may set on a queue."""

    transactional: bool = False
    quota: int = 0
    journal: bool = False
    journal_quota: int = 0
    label: str = ""
    anonymous: bool = False
    authenticate: bool = False  # only signed SRMP messages (MSMQ's authenticated queue)

    def as_properties(self) -> dict[str, str]:
        return {"transactional": str(int(self.transactional)), "quota": str(self.quota),
                "journal": str(int(self.journal)), "journal_quota": str(self.journal_quota),
                "label": self.label, "anonymous": str(int(self.anonymous)),
                "authenticate": str(int(self.authenticate))}

    @staticmethod
    def from_properties(props: dict[str, str], problems: list[str] | None = None
                        ) -> QueueSettings:
        """Settings from a registration file; a value that does not parse (a damaged file)
        takes its default and is named in ``problems``."""
        def number(key: str) -> int:
            raw = props.get(key) or "0"
            if raw.isascii() and raw.isdigit():
                return int(raw)
            if problems is not None:
                problems.append(f"{key}={raw!r}")
            return 0
        return QueueSettings(transactional=props.get("transactional") == "1",
                             quota=number("quota"), journal=props.get("journal") == "1",
                             journal_quota=number("journal_quota"),
                             label=props.get("label", ""),
                             anonymous=props.get("anonymous") == "1",
                             authenticate=props.get("authenticate") == "1")
