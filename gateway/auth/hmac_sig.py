"""HMAC request signatures (pure; time is an argument).

A partner signs a request with its shared secret::

    Authorization: EP-HMAC-SHA256 partner=<name>, ts=<unix seconds>, nonce=<16-64 chars>,
                   sig=<base64 HMAC-SHA256(secret, string to sign)>

    string to sign = METHOD "\\n" PATH?QUERY "\\n" ts "\\n" nonce "\\n" hex SHA-256 of the body

The timestamp must lie within the replay window of now, and a (partner, nonce) pair is
accepted once within twice that window, so a captured request cannot be sent again. The
nonce cache is bounded: when it is full of unexpired nonces, signed requests are refused
(503) rather than letting a replay through.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["SCHEME", "SignedRequest", "SignatureError", "parse_authorization",
           "string_to_sign", "sign", "verify", "NonceCache"]

SCHEME = "EP-HMAC-SHA256"
_NONCE = re.compile(r"^[A-Za-z0-9_.~-]{16,64}$")


class SignatureError(ValueError):
    """The signature is malformed, stale, replayed or wrong (401)."""


@dataclass(frozen=True, slots=True)
class SignedRequest:
    partner: str
    ts: int
    nonce: str
    sig: bytes


def parse_authorization(value: str) -> SignedRequest:
    """Raises: SignatureError naming the missing or malformed field."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise SignatureError(f"authorization scheme is not {SCHEME}")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            fields[key.strip().lower()] = val.strip()
    missing = [k for k in ("partner", "ts", "nonce", "sig") if not fields.get(k)]
    if missing:
        raise SignatureError(f"{SCHEME} lacks {', '.join(missing)}")
    if not (fields["ts"].isascii() and fields["ts"].isdigit()) or len(fields["ts"]) > 12:
        raise SignatureError("ts is not a Unix time in seconds")
    if not _NONCE.match(fields["nonce"]):
        raise SignatureError("nonce must be 16-64 characters of A-Z a-z 0-9 _ . ~ -")
    try:
        sig = base64.b64decode(fields["sig"], validate=True)
    except ValueError:
        raise SignatureError("sig is not base64") from None
    return SignedRequest(fields["partner"], int(fields["ts"]), fields["nonce"], sig)


def string_to_sign(method: str, path_qs: str, ts: int, nonce: str, body: bytes) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    return f"{method.upper()}\n{path_qs}\n{ts}\n{nonce}\n{digest}".encode()


def sign(secret: bytes, method: str, path_qs: str, ts: int, nonce: str, body: bytes,
         partner: str) -> str:
    """The Authorization header value (for clients and tests)."""
    mac = hmac.new(secret, string_to_sign(method, path_qs, ts, nonce, body), hashlib.sha256)
    sig = base64.b64encode(mac.digest()).decode()
    return f"{SCHEME} partner={partner}, ts={ts}, nonce={nonce}, sig={sig}"


def verify(signed: SignedRequest, secret: bytes, *, method: str, path_qs: str, body: bytes,
           now: float, window_s: float) -> None:
    """Raises: SignatureError for a stale timestamp or a wrong signature."""
    if abs(now - signed.ts) > window_s:
        raise SignatureError(f"timestamp {signed.ts} is outside the replay window of "
                             f"{int(window_s)} s (clock skew or an old request)")
    expected = hmac.new(secret, string_to_sign(method, path_qs, signed.ts, signed.nonce, body),
                        hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signed.sig):
        raise SignatureError("signature does not match")


class NonceCache:
    """(partner, nonce) pairs seen within ``2 * window_s``, oldest first."""

    def __init__(self, *, window_s: float, entries_max: int) -> None:
        self.window_s = window_s
        self.entries_max = entries_max
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, partner: str, nonce: str, now: float) -> bool | None:
        """True: first use; False: a replay; None: the cache is full (refuse for now)."""
        horizon = now - 2 * self.window_s
        while self._seen and next(iter(self._seen.values())) < horizon:
            self._seen.popitem(last=False)
        key = (partner, nonce)
        if key in self._seen:
            return False
        if len(self._seen) >= self.entries_max:
            return None
        self._seen[key] = now
        return True
