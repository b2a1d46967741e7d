"""Credentials -> principals: API keys (compared by SHA-256, never stored in clear), HMAC
request signatures, client certificates; plus each partner's rate limit.

Built once from the settings (reading the HMAC secret files). ``required`` is true as soon as
any credential is configured; then a request without one is 401.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

from gateway.auth.hmac_sig import (
    SCHEME,
    NonceCache,
    SignatureError,
    parse_authorization,
    verify,
)
from gateway.auth.principal import ADMIN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import subject_matches
from gateway.errors import ConfigError
from gateway.settings import Settings

__all__ = ["Authenticator", "Credentials", "AuthError", "read_secret"]


def read_secret(path: str, key: str) -> bytes:
    """A shared secret from its file (kept out of the config).

    Raises:
        ConfigError: naming ``key`` when the file cannot be read or holds under 16 bytes.
    """
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    if len(secret) < 16:
        raise ConfigError(f"{key}: the secret is shorter than 16 bytes")
    return secret


class AuthError(Exception):
    """A credential was presented and is wrong (401)."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request presents: the Authorization header, the client-certificate subject,
    and what HMAC signatures cover."""

    authorization: str
    cert_subject: str
    method: str
    path_qs: str
    body: bytes


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        """Raises: ConfigError when a partner's HMAC secret file cannot be read."""
        auth = settings.auth
        self.window_s = auth.replay_window
        self.nonces = NonceCache(window_s=auth.replay_window, entries_max=auth.nonces_max)
        self._keys: dict[str, Principal] = {}
        if auth.admin_key_sha256:
            self._keys[auth.admin_key_sha256] = ADMIN
        self._secrets: dict[str, tuple[Principal, bytes]] = {}
        self._subjects: list[tuple[str, Principal]] = []
        self._buckets: dict[str, TokenBucket] = {}
        for p in settings.partners:
            principal = Principal(p.name, send=p.send, receive=p.receive)
            if p.api_key_sha256:
                self._keys[p.api_key_sha256] = principal
            if p.hmac_secret_file:
                secret = read_secret(p.hmac_secret_file, f"partners.{p.name}.hmac_secret_file")
                self._secrets[p.name] = (principal, secret)
            if p.cert_subject:
                self._subjects.append((p.cert_subject, principal))
            if p.rate:
                self._buckets[p.name] = TokenBucket(p.rate, p.burst or 2 * p.rate)
        self.required = bool(self._keys or self._secrets or self._subjects)

    def authenticate(self, creds: Credentials, *, now: float) -> Principal | None:
        """The principal the credentials prove, or None when none was presented.

        Raises:
            AuthError: a credential was presented and is wrong, stale or replayed.
            OverflowError: the nonce cache is full (503).
        """
        header = creds.authorization.strip()
        if header.startswith(SCHEME):
            return self._signed(creds, now)
        if header[:7].lower() == "bearer ":
            return self._key(header[7:].strip())
        if header[:6].lower() == "basic ":
            # Browsers (the status page): any user name, the API key as the password.
            try:
                decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise AuthError("malformed Basic credentials") from None
            return self._key(decoded.partition(":")[2])
        if header:
            raise AuthError(f"unsupported authorization scheme (use Bearer, Basic or {SCHEME})")
        if creds.cert_subject:
            for subject, principal in self._subjects:
                if subject_matches(subject, creds.cert_subject):
                    return principal
        return None

    def _key(self, key: str) -> Principal:
        digest = hashlib.sha256(key.encode()).hexdigest()
        for known, principal in self._keys.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise AuthError("unknown API key")

    def _signed(self, creds: Credentials, now: float) -> Principal:
        try:
            signed = parse_authorization(creds.authorization)
            found = self._secrets.get(signed.partner)
            if found is None:
                raise SignatureError(f"no partner {signed.partner!r} with an HMAC secret")
            principal, secret = found
            verify(signed, secret, method=creds.method, path_qs=creds.path_qs,
                   body=creds.body, now=now, window_s=self.window_s)
        except SignatureError as exc:
            raise AuthError(str(exc)) from exc
        admitted = self.nonces.admit(signed.partner, signed.nonce, now)
        if admitted is None:
            raise OverflowError("too many signed requests within the replay window")
        if not admitted:
            raise AuthError("replayed request: this nonce was already used")
        return principal

    def throttle(self, principal: Principal, now: float) -> float:
        """0 when the partner may go on, else the seconds until it may."""
        bucket = self._buckets.get(principal.name)
        return 0.0 if bucket is None else bucket.take(now)
