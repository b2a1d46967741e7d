"""Named loggers of the store package."""

from __future__ import annotations

import logging

__all__ = ["recovery_log", "commit_log", "cleanup_log", "audit_log"]

recovery_log = logging.getLogger("store.recovery")
commit_log = logging.getLogger("store.commit")
cleanup_log = logging.getLogger("store.cleanup")
audit_log = logging.getLogger("store.audit")
