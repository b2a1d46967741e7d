"""Sender certificates for signed SRMP messages: ``<signers_dir>/<source QM GUID>.pem``.

Read once at start. A file that is not a PEM certificate with a DSA key is refused at start
(exit 2) with its name, rather than making every message from that sender fail later.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import dsa

from gateway.errors import ConfigError

__all__ = ["load_signers"]


def load_signers(directory: str) -> dict[str, dsa.DSAPublicKey]:
    """Raises: ConfigError naming the directory or file that is wrong."""
    if not directory:
        return {}
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"srmp.signers_dir: {directory} is not a directory")
    keys: dict[str, dsa.DSAPublicKey] = {}
    for path in sorted(root.glob("*.pem")):
        try:
            guid = str(uuid.UUID(path.stem))
        except ValueError:
            raise ConfigError(f"srmp.signers_dir: {path.name} is not named "
                              "<source QM GUID>.pem") from None
        try:
            key = x509.load_pem_x509_certificate(path.read_bytes()).public_key()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"srmp.signers_dir: {path.name}: not a PEM certificate "
                              f"({exc})") from exc
        if not isinstance(key, dsa.DSAPublicKey):
            raise ConfigError(f"srmp.signers_dir: {path.name}: the key is not DSA (SRMP "
                              "signatures are DSA)")
        keys[guid] = key
    return keys
