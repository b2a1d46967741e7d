"""systemd credentials in the configuration: ``credential:NAME`` for a file key.

Under ``DynamicUser=`` the service cannot read a root-owned 0600 key file; systemd hands it
over with ``LoadCredential=`` as ``$CREDENTIALS_DIRECTORY/NAME``, a path known only at start.
So every key that names a secret or certificate file also takes ``credential:NAME``, resolved
here once when ``entrepot serve`` starts (``gateway.settings`` stays pure); so do the key
hashes (``auth.admin_key_sha256``, ``auth.metrics_key_sha256``, a partner's
``api_key_sha256``), whose credential file holds the 64 hex digits ``entrepot auth hash-key``
prints: kept out of the world-readable configuration.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError
from gateway.settings import Settings
from gateway.settings_values import EMPTY_KEY_REFUSED, EMPTY_KEY_SHA256

__all__ = ["PREFIX", "resolve_credentials"]

PREFIX = "credential:"
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,255}")  # systemd's credential names, no '/'
_HEX64 = re.compile(r"[0-9a-f]{64}")

# The file keys, by section; the [[tables]] are named with their index (partners[0]...).
_SECTION_KEYS: dict[str, tuple[str, ...]] = {"server": ("tls_cert", "tls_key", "tls_client_ca")}
_TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "partners": ("hmac_secret_file",), "webhooks": ("hmac_secret_file",),
    "peers": ("cafile", "client_cert", "client_key")}


def resolve_credentials(settings: Settings, directory: str | None) -> Settings:
    """``settings`` with each ``credential:NAME`` value replaced by ``directory/NAME``.

    Args:
        directory: ``$CREDENTIALS_DIRECTORY`` (None or empty: not started by systemd with
            credentials).

    Raises:
        ConfigError: naming the key when the name is malformed, when there is no credentials
            directory, or when it holds no such credential.
    """
    changes: dict[str, Any] = {}
    for section, keys in _SECTION_KEYS.items():
        table = getattr(settings, section)
        values = {key: _resolve(f"{section}.{key}", getattr(table, key), directory)
                  for key in keys}
        changes[section] = dataclasses.replace(table, **values)
    auth = settings.auth
    changes["auth"] = dataclasses.replace(
        auth,
        admin_key_sha256=_read_hash("auth.admin_key_sha256", auth.admin_key_sha256, directory),
        metrics_key_sha256=_read_hash("auth.metrics_key_sha256", auth.metrics_key_sha256,
                                      directory))
    for name, keys in _TABLE_KEYS.items():
        changes[name] = tuple(
            dataclasses.replace(entry, **{
                key: _resolve(f"{name}[{index}].{key}", getattr(entry, key), directory)
                for key in keys})
            for index, entry in enumerate(getattr(settings, name)))
    changes["partners"] = tuple(
        dataclasses.replace(partner, api_key_sha256=_read_hash(
            f"partners[{index}].api_key_sha256", partner.api_key_sha256, directory))
        for index, partner in enumerate(changes["partners"]))
    return dataclasses.replace(settings, **changes)


def _resolve(key: str, value: str, directory: str | None) -> str:
    if not value.startswith(PREFIX):
        return value
    name = value[len(PREFIX):]
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"{key}: {value!r}: a credential name is 1-255 letters, digits or "
                          "'_.@-' (no '/')")
    if not directory:
        raise ConfigError(f"{key}: {value!r} names a systemd credential, but "
                          "$CREDENTIALS_DIRECTORY is not set (LoadCredential= in the unit)")
    path = Path(directory) / name
    if not path.is_file():
        raise ConfigError(f"{key}: credential {name!r} is not in $CREDENTIALS_DIRECTORY "
                          f"({directory}): check LoadCredential= in the unit")
    return str(path)


def _read_hash(key: str, value: str, directory: str | None) -> str:
    if not value.startswith(PREFIX):
        return value
    path = Path(_resolve(key, value, directory))
    try:
        digest = path.read_text(encoding="ascii").strip().lower()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{key}: credential {path.name!r}: cannot read it: {exc}") from exc
    # The bare digest, or the line `entrepot auth hash-key KEY` prints ("sha256  <digest>").
    label, _, rest = digest.partition(" ")
    if label == "sha256":
        digest = rest.strip()
    if not _HEX64.fullmatch(digest):
        raise ConfigError(f"{key}: credential {path.name!r}: expected 64 hex digits (the "
                          "SHA-256 `entrepot auth hash-key` prints)")
    if digest == EMPTY_KEY_SHA256:
        raise ConfigError(f"{key}: credential {path.name!r}: {EMPTY_KEY_REFUSED}")
    return digest
