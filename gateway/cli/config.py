"""Which configuration file a command reads: ``--config``, then ``$ENTREPOT_CONFIG``, then
``config/entrepot.toml`` when it exists; none (the built-in defaults) otherwise. Every command
that reads the configuration takes it the same way, so serve, health, the admin commands and
the mapping commands agree on the gateway they mean."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_CONFIG", "config_path"]

DEFAULT_CONFIG = Path("config/entrepot.toml")


def config_path(given: Path | None, default: Path = DEFAULT_CONFIG) -> Path | None:
    if given is not None:
        return given
    if os.environ.get("ENTREPOT_CONFIG"):
        return Path(os.environ["ENTREPOT_CONFIG"])
    return default if default.is_file() else None
