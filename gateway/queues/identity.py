"""The queue manager's identity: a GUID made once per data directory (``qm.json``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

__all__ = ["load_guid"]


def load_guid(data_dir: Path) -> str:
    """Read the GUID, or make and keep one on first start. Blocking."""
    path = data_dir / "qm.json"
    if path.exists():
        return str(json.loads(path.read_text())["guid"])
    guid = str(uuid.uuid4())
    building = path.with_name("qm.json.tmp")
    building.write_text(json.dumps({"guid": guid}))
    building.replace(path)
    return guid
