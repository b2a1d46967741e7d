"""HMAC request signatures (pure; time is an argument).

A partner signs a request with its shared secret::

    Authorization: EP-HMAC-SHA256 partner=<name>, ts=<unix seconds>, nonce=<16-64 chars>,
                   sig=<base64 HMAC-SHA256(secret, string to sign)>

The string to sign is these lines joined by "\\n" (no final "\\n"), encoded as UTF-8::

    METHOD (upper case)
    PATH?QUERY (aiohttp's ``request.path_qs``: as on the request line, escapes kept)
    ts
    nonce
    hex SHA-256 of the body (lower case)
    name:value   one line per covered header

The covered headers are every ``Mq-*`` header, ``Idempotency-Key`` and ``Content-Type``:
each of them the request carries, so one added, removed or changed after signing makes the
signature wrong. Canonical form: the name in lower case; the value with its leading and
trailing spaces and tabs removed, inner whitespace kept byte for byte; the header lines
sorted by name (a covered header sent twice never gets here: the web edge refuses it, 400).
A header sent with an empty value is a line ``name:``. Other headers (Host, Accept,
User-Agent, ...) are not covered. A client sends the path and query without
needless percent-escapes, and every covered header it means to send (HTTP libraries add a
Content-Type to a body of their own accord: set it, and sign it).

The timestamp must lie within the replay window of now, and a nonce is accepted once per
partner within twice that window, so a captured request cannot be sent again. Each
partner has its own bounded nonce cache: when a partner's is full of unexpired nonces its
signed requests are refused (503) rather than letting a replay through, and no other
partner is affected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SCHEME", "SignedRequest", "SignatureError", "is_signed", "parse_authorization",
           "covered_headers", "string_to_sign", "sign", "verify", "NonceCache"]

SCHEME = "EP-HMAC-SHA256"
_NONCE = re.compile(r"^[A-Za-z0-9_.~-]{16,64}\Z")
_COVERED = frozenset({"idempotency-key", "content-type"})  # and every mq-*
_LINE_BREAK = re.compile(r"[\r\n\x00]")


class SignatureError(ValueError):
    """The signature is malformed, stale, replayed or wrong (401)."""


@dataclass(frozen=True, slots=True)
class SignedRequest:
    partner: str
    ts: int
    nonce: str
    sig: bytes


def is_signed(authorization: str) -> bool:
    """The header names this scheme, in any case (RFC 9110 11.1: schemes are
    case-insensitive)."""
    scheme = authorization.lstrip().partition(" ")[0]
    return len(scheme) == len(SCHEME) and scheme.upper() == SCHEME


def parse_authorization(value: str) -> SignedRequest:
    """Raises: SignatureError naming the missing or malformed field."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.upper() != SCHEME:
        raise SignatureError(f"authorization scheme is not {SCHEME}")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            fields[key.strip().lower()] = val.strip()
    missing = [k for k in ("partner", "ts", "nonce", "sig") if not fields.get(k)]
    if missing:
        raise SignatureError(f"{SCHEME} lacks {', '.join(missing)}")
    ts = fields["ts"]
    if not (ts.isascii() and ts.isdigit()) or len(ts) > 12 or (ts[0] == "0" and ts != "0"):
        # As written, without leading zeros: the signature covers the number's own digits.
        raise SignatureError("ts is not a Unix time in seconds (digits, no leading zero)")
    if not _NONCE.match(fields["nonce"]):
        raise SignatureError("nonce must be 16-64 characters of A-Z a-z 0-9 _ . ~ -")
    try:
        sig = base64.b64decode(fields["sig"], validate=True)
    except ValueError:
        raise SignatureError("sig is not base64") from None
    return SignedRequest(fields["partner"], int(fields["ts"]), fields["nonce"], sig)


def covered_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (name, value) pairs a signature covers, in canonical form (module docstring)."""
    picked = []
    for name, value in headers:
        lower = name.lower()
        if lower.startswith("mq-") or lower in _COVERED:
            picked.append((lower, value.strip(" \t")))
    picked.sort(key=lambda pair: pair[0])  # stable: repeats keep the order they were sent in
    return picked


def string_to_sign(method: str, path_qs: str, ts: int, nonce: str, body: bytes,
                   headers: Iterable[tuple[str, str]]) -> bytes:
    """``headers``: all the request's headers (the covered ones are picked here).

    Header values are text as aiohttp gives them (bytes that are not UTF-8 decoded with
    surrogateescape), so the encoding gives back the bytes sent."""
    lines = [method.upper(), path_qs, str(ts), nonce, hashlib.sha256(body).hexdigest()]
    lines += [f"{name}:{value}" for name, value in covered_headers(headers)]
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def sign(secret: bytes, method: str, path_qs: str, ts: int, nonce: str, body: bytes,
         partner: str, *, headers: Iterable[tuple[str, str]]) -> str:
    """The Authorization header value (for clients and tests). ``headers``: every header
    the request will carry (at least each covered one, exactly as it will be sent).

    Raises:
        ValueError: a header value holds CR, LF or NUL (no HTTP request can carry it).
    """
    headers = list(headers)
    for name, value in headers:
        if _LINE_BREAK.search(value):
            raise ValueError(f"header {name}: the value holds CR, LF or NUL")
    mac = hmac.new(secret, string_to_sign(method, path_qs, ts, nonce, body, headers),
                   hashlib.sha256)
    sig = base64.b64encode(mac.digest()).decode()
    return f"{SCHEME} partner={partner}, ts={ts}, nonce={nonce}, sig={sig}"


def verify(signed: SignedRequest, secret: bytes, *, method: str, path_qs: str, body: bytes,
           headers: Iterable[tuple[str, str]], now: float, window_s: float) -> None:
    """Raises: SignatureError for a stale timestamp or a wrong signature."""
    if abs(now - signed.ts) > window_s:
        raise SignatureError(f"timestamp {signed.ts} is outside the replay window of "
                             f"{int(window_s)} s (clock skew or an old request)")
    expected = hmac.new(secret, string_to_sign(method, path_qs, signed.ts, signed.nonce, body,
                                               headers), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signed.sig):
        raise SignatureError("signature does not match (it covers the method, path and "
                             "query, ts, nonce, body, Content-Type, Idempotency-Key and "
                             "every Mq-* header)")


class NonceCache:
    """One partner's nonces seen within ``2 * window_s``, oldest first, at most
    ``entries_max``.

    ``check`` then ``add``: a request refused between the two (its partner is over its rate
    limit) takes no slot."""

    def __init__(self, *, window_s: float, entries_max: int) -> None:
        self.window_s = window_s
        self.entries_max = entries_max
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, nonce: str, now: float) -> bool | None:
        """True: unused and there is room; False: a replay; None: the cache is full of live
        nonces (refuse for now rather than forget one)."""
        horizon = now - 2 * self.window_s
        while self._seen and next(iter(self._seen.values())) < horizon:
            self._seen.popitem(last=False)
        if nonce in self._seen:
            return False
        return None if len(self._seen) >= self.entries_max else True

    def add(self, nonce: str, now: float) -> None:
        """Records a nonce ``check`` found unused (with no await in between)."""
        self._seen[nonce] = now

    def entries(self) -> list[tuple[str, float]]:
        """(nonce, when it was used), oldest first: what a restart must still refuse."""
        return list(self._seen.items())
