"""Credentials -> principals: API keys (compared by SHA-256, never stored in clear), HMAC
request signatures, client certificates; plus each partner's rate limit.

Built once from the settings (reading the HMAC secret files, parsing the certificate
subjects). ``required`` is true as soon as any credential is configured; then a request
without one is 401.

Partners are kept apart: each has its own token bucket and its own nonce cache, and a signed
request takes its nonce slot only once it has passed the rate limit, so neither a partner
over its limit nor one sending many signed requests refuses another's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.auth.hmac_sig import (
    SCHEME,
    NonceCache,
    SignatureError,
    SignedRequest,
    is_signed,
    parse_authorization,
    verify,
)
from gateway.auth.principal import ADMIN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import SubjectKey, parse_subject, subject_key
from gateway.errors import ConfigError
from gateway.settings import Settings

__all__ = ["AuthError", "Authenticator", "Credentials", "MARK_AHEAD_S", "RateLimited",
           "presented_key", "read_secret"]

# A mark covers signatures up to this many seconds beyond the one that made it: a partner
# whose clock runs ahead has one written every so often, not one per request, and after a
# crash waits at most this long past its mark.
MARK_AHEAD_S = 10


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


class RateLimited(Exception):
    """The partner is over its rate limit (429); ``wait_s`` until it may go on."""

    def __init__(self, partner: str, wait_s: float) -> None:
        super().__init__(f"partner {partner!r} is over its rate limit")
        self.wait_s = wait_s


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request presents: the Authorization header, the verified client certificate's
    subject (``tls.subject_key``), and what HMAC signatures cover (``headers``: all the
    request's, as pairs)."""

    authorization: str
    cert_subject: SubjectKey | None
    method: str
    path_qs: str
    body: bytes
    headers: Iterable[tuple[str, str]]
    # The partner's token was taken already: by the front that passed the request on.
    throttled: bool = False
    # A signed request's nonce was used up already: by the front that passed it on, at the
    # store owner (``Authenticator.take_nonce``).
    nonce_taken: bool = False


def presented_key(authorization: str) -> str | None:
    """The API key an Authorization header carries: ``Bearer <key>``, or Basic credentials
    with the key as the password (browsers: the status page; any user name). None for
    another scheme or no header.

    Raises:
        AuthError: Basic credentials that are not base64 of UTF-8 text.
    """
    scheme, _, value = authorization.strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return value.strip()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError("malformed Basic credentials") from None
        return decoded.partition(":")[2]
    return None


class Authenticator:
    def __init__(self, settings: Settings, *, rate_limits: bool = True) -> None:
        """``rate_limits=False`` for a front process (gateway.fronts): the store owner keeps
        each partner's one bucket and applies it (``throttle``).

        Raises: ConfigError when a partner's HMAC secret file cannot be read or its
        certificate subject is not an RFC 4514 name."""
        auth = settings.auth
        self.window_s = auth.replay_window
        self._keys: dict[str, Principal] = {}
        if auth.admin_key_sha256:
            self._keys[auth.admin_key_sha256] = ADMIN
        self._secrets: dict[str, tuple[Principal, bytes]] = {}
        self.nonces: dict[str, NonceCache] = {}  # per partner: none can fill another's
        # Signatures made before this time are refused: set at start when the nonces used
        # before it were not saved (gateway.auth.nonce_file).
        self.signed_after = 0.0
        # The same per partner, for signatures made ahead of the gateway's clock: after a
        # crash, those up to the partner's mark may have been taken before it.
        self.signed_after_by_partner: dict[str, int] = {}
        # Per partner, the ts up to which signatures made ahead of the clock are covered by a
        # mark ``mark`` has written (gateway.auth.nonce_file); None: nothing is written.
        self.marked: dict[str, int] = {}
        self.mark: Callable[[Mapping[str, int]], bool] | None = None  # False: not written
        self.run = ""  # this run's id, which a clean stop's saved nonces carry
        self._subjects: dict[SubjectKey, Principal] = {}
        self._buckets: dict[str, TokenBucket] = {}
        for index, p in enumerate(settings.partners):
            principal = Principal(p.name, send=p.send, receive=p.receive)
            if p.api_key_sha256:
                self._keys[p.api_key_sha256] = principal
            if p.hmac_secret_file:
                secret = read_secret(p.hmac_secret_file, f"partners[{index}].hmac_secret_file")
                self._secrets[p.name] = (principal, secret)
                self.nonces[p.name] = NonceCache(window_s=auth.replay_window,
                                                 entries_max=auth.nonces_max)
            if p.cert_subject:
                key = f"partners[{index}].cert_subject"
                try:
                    subject = subject_key(parse_subject(p.cert_subject))
                except ValueError as exc:
                    raise ConfigError(f"{key}: {exc}") from None
                other = self._subjects.setdefault(subject, principal)
                if other is not principal:
                    raise ConfigError(f"{key}: the same subject as partner {other.name!r}")
            if p.rate and rate_limits:
                self._buckets[p.name] = TokenBucket(p.rate, p.burst or 2 * p.rate)
        self.required = bool(self._keys or self._secrets or self._subjects)

    def authenticate(self, creds: Credentials, *, now: float, monotonic: float
                     ) -> Principal | None:
        """The principal the credentials prove, or None when none was presented; past
        its partner's rate limit. ``now`` is the wall clock (signature timestamps),
        ``monotonic`` the clock of the rate limits.

        Raises:
            AuthError: a credential was presented and is wrong, stale or replayed.
            OverflowError: the partner's nonce cache is full (503).
            RateLimited: the partner is over its rate limit (429).
        """
        header = creds.authorization.strip()
        if is_signed(header):
            return self._signed(creds, now, monotonic)
        key = presented_key(header)
        if key is not None and not key.strip():  # matches no hash, even one configured
            raise AuthError("the API key is empty")
        if key is not None:
            principal: Principal | None = self._key(key)
        elif header:
            raise AuthError(f"unsupported authorization scheme (use Bearer, Basic or {SCHEME})")
        elif creds.cert_subject is not None:
            principal = self._subjects.get(creds.cert_subject)
        else:
            principal = None
        if principal is not None and not creds.throttled:
            self._throttle(principal, monotonic)
        return principal

    def known_signer(self, authorization: str) -> None:
        """Check what a signed request's header says before its body is read: a well-formed
        EP-HMAC-SHA256 header naming a partner with a secret.

        Raises:
            AuthError: malformed, or no such partner.
        """
        try:
            partner = parse_authorization(authorization).partner
        except SignatureError as exc:
            raise AuthError(str(exc)) from exc
        if partner not in self._secrets:
            raise AuthError(f"no partner {partner!r} with an HMAC secret")

    def _key(self, key: str) -> Principal:
        digest = hashlib.sha256(key.encode()).hexdigest()
        for known, principal in self._keys.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise AuthError("unknown API key")

    def _signed(self, creds: Credentials, now: float, monotonic: float) -> Principal:
        principal, signed = self.verify_signed(creds, now)
        if not creds.nonce_taken:
            self.take_nonce(signed, now=now, monotonic=monotonic, throttled=creds.throttled)
        return principal

    def verify_signed(self, creds: Credentials, now: float
                      ) -> tuple[Principal, SignedRequest]:
        """The partner whose secret signed the request, and what it signed; its nonce is
        not looked at (``take_nonce``: a front checks the signature, the owner the nonce).

        Raises:
            AuthError: malformed, no such partner, stale, or a wrong signature.
        """
        try:
            signed = parse_authorization(creds.authorization)
            found = self._secrets.get(signed.partner)
            if found is None:
                raise SignatureError(f"no partner {signed.partner!r} with an HMAC secret")
            principal, secret = found
            verify(signed, secret, method=creds.method, path_qs=creds.path_qs,
                   body=creds.body, headers=creds.headers, now=now, window_s=self.window_s)
        except SignatureError as exc:
            raise AuthError(str(exc)) from exc
        return principal, signed

    def take_nonce(self, signed: SignedRequest, *, now: float, monotonic: float,
                   throttled: bool) -> None:
        """Use up a verified request's nonce, past its partner's rate limit (unless
        ``throttled``: its token is taken already).

        Raises:
            AuthError: signed before this gateway started (unknown nonces), or replayed.
            OverflowError: the partner's nonce cache is full, or a mark cannot be written (503).
            RateLimited: the partner is over its rate limit (429); the nonce stays unused.
        """
        if signed.ts < self.signed_after:
            raise AuthError("signed before this gateway started, which kept no record of the "
                            "nonces used before it: sign the request again")
        ahead = self.signed_after_by_partner.get(signed.partner, 0)
        if signed.ts <= ahead:
            raise AuthError(f"signed at or before {ahead} by a clock ahead of the gateway's, "
                            "which did not stop cleanly and cannot tell such a signature "
                            "from one it took: sign the request again after that time")
        nonces = self.nonces[signed.partner]
        fresh = nonces.check(signed.nonce, now)
        if fresh is None:
            raise OverflowError(f"partner {signed.partner!r} sent too many signed requests "
                                "within the replay window")
        if not fresh:
            raise AuthError("replayed request: this nonce was already used")
        if not throttled:
            self.throttle(signed.partner, monotonic)  # refused: the nonce stays unused
        if (signed.ts > now and self.mark is not None
                and signed.ts > self.marked.get(signed.partner, 0)):
            # A signature ahead of the clock outlives a crash's start: marked before taken.
            before = self.marked.get(signed.partner)
            self.marked[signed.partner] = signed.ts + MARK_AHEAD_S
            if not self.mark(self.marked):
                if before is None:
                    del self.marked[signed.partner]
                else:
                    self.marked[signed.partner] = before
                raise OverflowError("a signature ahead of the gateway's clock is taken only "
                                    "once its mark is written, and it could not be: sign "
                                    "again with a clock in step, or retry later")
        nonces.add(signed.nonce, now)

    def _throttle(self, principal: Principal, monotonic: float) -> None:
        self.throttle(principal.name, monotonic)

    def throttle(self, partner: str, monotonic: float) -> None:
        """Take one of the partner's tokens.

        Raises: RateLimited when the partner has no token left (none is taken then)."""
        bucket = self._buckets.get(partner)
        wait = 0.0 if bucket is None else bucket.take(monotonic)
        if wait:
            raise RateLimited(partner, wait)
