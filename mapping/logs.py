"""Named loggers of the mapping package."""

from __future__ import annotations

import logging

__all__ = ["reload_log"]

reload_log = logging.getLogger("mapping.reload")
