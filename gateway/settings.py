"""Typed settings: one frozen tree parsed from TOML by a pure function.

Theory of operation:
- Defaults live only in the field definitions below (``_size``, ``_duration``, ... record the
  unit and the allowed range in the field's metadata).
- ``parse_settings`` is pure: it walks the TOML document, refuses unknown keys, converts units,
  checks ranges and the relationships between fields, and raises ``ConfigError`` naming the full
  key path and the offending value.
- ``load_settings`` is the only I/O: read the file, ``tomllib``, ``parse_settings``.
- Precedence (built-in < file < command line) is applied by passing the command-line values as
  ``overrides``: they go through the same checks as the file.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import ConfigError
from gateway.range_wire import CONSUMER_NAME, CONSUMER_NAME_RULE
from gateway.settings_values import Spec as _Spec
from gateway.settings_values import convert as _convert
from gateway.settings_values import kind_of as _kind_of
from gateway.units import parse_duration, parse_listen, parse_size
from mapping.names import QueueNameError, parse_queue_path

__all__ = [
    "Settings",
    "ServerSettings",
    "StoreSettings",
    "MappingSettings",
    "SrmpSettings",
    "LinkSettings",
    "AuthSettings",
    "PartnerDeclaration",
    "WebhookDeclaration",
    "LandingDeclaration",
    "PeerDeclaration",
    "LogSettings",
    "MetricsSettings",
    "TransactionSettings",
    "QueueDeclaration",
    "parse_settings",
    "load_settings",
    "parse_listen",
]

def _size(default: str, *, low: str, high: str) -> Any:
    spec = _Spec("size", parse_size(low), parse_size(high))
    return field(default=parse_size(default), metadata={"spec": spec})


def _duration(default: str, *, low: str, high: str) -> Any:
    spec = _Spec("duration", parse_duration(low), parse_duration(high))
    return field(default=parse_duration(default), metadata={"spec": spec})


def _int(default: int, *, low: int, high: int) -> Any:
    return field(default=default, metadata={"spec": _Spec("int", low, high)})


def _bool(default: bool) -> Any:
    return field(default=default, metadata={"spec": _Spec("bool")})


def _str(default: str) -> Any:
    return field(default=default, metadata={"spec": _Spec("str")})


def _choice(default: str, *choices: str) -> Any:
    assert default in choices
    return field(default=default, metadata={"spec": _Spec("choice", choices=choices)})


def _names() -> Any:
    return field(default=(), metadata={"spec": _Spec("names")})


def _text(default: str = "") -> Any:
    """A string that may be empty (empty: the feature is off)."""
    return field(default=default, metadata={"spec": _Spec("text")})


def _sha256() -> Any:
    """Empty, or the SHA-256 of a secret as 64 hex digits (secrets are never stored)."""
    return field(default="", metadata={"spec": _Spec("sha256")})


def _urls() -> Any:
    """http(s) URLs or URL prefixes (a trailing ``*`` is allowed and means the same)."""
    return field(default=(), metadata={"spec": _Spec("urls")})


def _networks(*default: str) -> Any:
    return field(default=default, metadata={"spec": _Spec("networks")})


def _listen(default: str) -> Any:
    return field(default=default, metadata={"spec": _Spec("listen")})


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """The HTTP listener."""

    listen: str = _listen("127.0.0.1:8080")
    shutdown_grace: float = _duration("10s", low="0s", high="10m")
    request_body_max: int = _size("5MiB", low="1KiB", high="1GiB")
    concurrent_requests_max: int = _int(1024, low=1, high=100_000)
    # Receives parked waiting for a message (``receive?wait=``): their own cap, outside the
    # in-flight one; a partner may park at most a quarter of them (gateway.web.long_polls).
    long_polls_max: int = _int(1024, low=1, high=100_000)
    keepalive_timeout: float = _duration("75s", low="1s", high="1h")
    # Connections open at once, idle ones included; one more is closed as it is accepted
    # (each holds a file descriptor the store must not run out of: gateway.web.http_server).
    connections_max: int = _int(10_000, low=16, high=1_000_000)
    # Host names (and addresses) senders use to reach this gateway; with localhost, the
    # machine's own names and addresses and the listen address they make a format name local.
    names: tuple[str, ...] = _names()
    # TLS (>= 1.2) when both are set: PEM certificate chain and private key.
    tls_cert: str = _text()
    tls_key: str = _text()
    # With a CA bundle, clients may present certificates (mapped to partners by subject).
    tls_client_ca: str = _text()
    # A TLS handshake not ended within this time is closed (the connection counts against
    # ``connections_max`` from its accept: gateway.web.http_server).
    tls_handshake_timeout: float = _duration("10s", low="100ms", high="60s")
    # Requests whose body has not arrived within this time are answered 408.
    body_timeout: float = _duration("30s", low="100ms", high="1h")
    header_count_max: int = _int(100, low=8, high=1000)
    header_bytes_max: int = _size("8KiB", low="1KiB", high="1MiB")
    # Processes: 1 serves everything in one; N > 1 starts N front processes around the one
    # that owns the store (gateway.fronts, docs/architecture.md); 0, the default, one per
    # usable CPU (gateway.fronts.cpus), so one process on a machine of one.
    workers: int = _int(0, low=0, high=64)

    @property
    def host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return parse_listen(self.listen)[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSettings:
    """The message store (docs/store.md)."""

    data_dir: str = _str("./var/entrepot")
    segment_size: int = _size("4MiB", low="64KiB", high="1GiB")  # multiple of 4KiB
    machine_quota: int = _size("8GiB", low="1MiB", high="64TiB")
    machine_journal_quota: int = _size("8GiB", low="1MiB", high="64TiB")
    express_memory: int = _size("64MiB", low="0B", high="64GiB")
    cleanup_interval: float = _duration("30s", low="100ms", high="7d")
    archive_segments: bool = _bool(False)
    checkpoint_interval: float = _duration("5s", low="100ms", high="1h")
    qmlog_size: int = _size("16MiB", low="1MiB", high="4GiB")
    group_commit_bytes_max: int = _size("512KiB", low="4KiB", high="64MiB")
    audit_interval: float = _duration("60s", low="1s", high="1d")


@dataclass(frozen=True, slots=True, kw_only=True)
class MappingSettings:
    """Mapping files (redirections, stream receipts)."""

    dir: str = _str("config/mapping")
    reload_interval: float = _duration("2s", low="100ms", high="1h")


@dataclass(frozen=True, slots=True, kw_only=True)
class SrmpSettings:
    """The SRMP front door (MSMQ over HTTP)."""

    # Request-URI prefixes (IIS virtual directories) SRMP is accepted under, case-insensitive.
    virtual_dirs: tuple[str, ...] = field(default=("msmq",),
                                          metadata={"spec": _Spec("names")})
    # Senders from these networks may send to any queue; others only to anonymous queues.
    allow_networks: tuple[str, ...] = _networks("127.0.0.0/8", "::1/128")
    streams_max: int = _int(100_000, low=1, high=10_000_000)
    stream_checkpoint_interval: float = _duration("5s", low="100ms", high="1h")
    receipt_timeout: float = _duration("20s", low="100ms", high="10m")
    receipt_attempts: int = _int(8, low=1, high=1000)
    receipts_pending_max: int = _int(10_000, low=1, high=1_000_000)
    # Certificates of signing senders: <source QM GUID>.pem (DSA keys; docs/srmp.md,
    # "Signatures").
    signers_dir: str = _text()
    # This gateway's base URL as remote queue managers reach it (receipt and admin queue
    # URLs in messages it sends); empty: http://<first of server.names, else listen address>.
    public_url: str = _text()
    # A stream message ahead of the next expected one waits this long (within the window)
    # for those before it: a sender keeps several in flight, so they may arrive out of order.
    reorder_wait: float = _duration("2s", low="0s", high="1m")
    reorder_window: int = _int(1024, low=1, high=1_000_000)
    # Transparent store-and-forward: accept and forward messages whose <to> names another
    # host (otherwise only when an inbound redirection leads to another host).
    forward: bool = _bool(False)
    # Worker processes that parse SRMP requests off the event loop (0: parse on the loop,
    # large requests in a thread). The gateway is bound by its one GIL, not by CPU.
    parse_workers: int = _int(1, low=0, high=16)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSettings:
    """Links to remote queue managers (SRMP senders draining the outgoing queues)."""

    request_timeout: float = _duration("20s", low="100ms", high="10m")
    idle_timeout: float = _duration("300s", low="1s", high="1d")
    retry_max: float = _duration("60s", low="10ms", high="1h")
    # Waits for a stream receipt before resending the unacknowledged messages (Windows:
    # 30 s x3, 5 min x3, 30 min x3, then 6 h); the last one repeats.
    resend: tuple[float, ...] = field(
        default=(30.0, 30.0, 30.0, 300.0, 300.0, 300.0, 1800.0, 1800.0, 1800.0, 21600.0),
        metadata={"spec": _Spec("durations")})
    stream_element: str = _choice("stream", "stream", "Stream")
    # Transactional messages in flight at once per link (the receiver puts them in order).
    window: int = _int(64, low=1, high=4096)
    # Resend rounds without any stream receipt after which the receiver is taken to have
    # lost the stream and the waiting messages move to a new stream.
    restart_stream_after: int = _int(9, low=1, high=1000)
    # Every link and receipt lane starts paused (`entrepot serve --links-paused`): a restored
    # copy of a store can be served and inspected without forwarding; resume links by hand.
    start_paused: bool = _bool(False)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundSettings:
    """Where senders' words may make the gateway connect (acknowledgement and receipt
    addresses): URL prefixes, besides the configured peers and webhooks and the mapping
    files' outbound redirections (gateway.auth.outbound)."""

    allow: tuple[str, ...] = _urls()
    # Receipts (stream, delivery, commitment) one sender may cause per second, and the burst
    # above it; beyond, they are dropped and counted (a sender that misses one resends).
    receipts_rate: int = _int(200, low=1, high=1_000_000)
    receipts_burst: int = _int(2000, low=1, high=10_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings:
    """Who may do what. With no admin key and no partner the gateway is open (fine on
    loopback, warned about elsewhere); with either, every request but health, metrics and the
    OpenAPI document needs a credential."""

    admin_key_sha256: str = _sha256()
    # A key that reads /metrics from other hosts (the admin key does too); without either,
    # /metrics answers loopback clients only: it names queues and partners' URLs.
    metrics_key_sha256: str = _sha256()
    replay_window: float = _duration("5m", low="10s", high="1h")
    nonces_max: int = _int(1_000_000, low=1000, high=100_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartnerDeclaration:
    """A ``[[partners]]`` table: one partner, its credentials and what it may touch."""

    name: str = _str("partner")
    api_key_sha256: str = _sha256()
    # A file holding the shared secret of HMAC request signatures (kept out of this file).
    hmac_secret_file: str = _text()
    # Client-certificate subject, e.g. "CN=acme.example.com,O=Acme" (order does not matter).
    cert_subject: str = _text()
    # Queues the partner may send to / receive from; a trailing * is a prefix.
    send: tuple[str, ...] = _names()
    receive: tuple[str, ...] = _names()
    rate: int = _int(0, low=0, high=1_000_000)  # requests per second, 0 = no limit
    burst: int = _int(0, low=0, high=10_000_000)  # 0 = twice the rate


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookDeclaration:
    """A ``[[webhooks]]`` table: destinations that are plain HTTP endpoints, not queue
    managers; their links POST each message's body with its properties as headers."""

    url: str = _str("webhook")  # a destination URL, or a prefix ending in *
    name: str = _text()  # the partner name in the signature (default: the URL's host)
    hmac_secret_file: str = _text()  # signs each POST (EP-HMAC-SHA256) when set


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerDeclaration:
    """A ``[[peers]]`` table: settings of the links to one remote queue manager (or every
    destination under a prefix ending in ``*``), overriding ``[links]``."""

    url: str = _str("peer")  # a destination URL, or a prefix ending in *
    stream_element: str = _choice("", "", "stream", "Stream")  # "": links.stream_element
    window: int = _int(0, low=0, high=1024)  # 0: links.window
    cafile: str = _text()  # CA bundle that verifies the peer's certificate (else the system's)
    client_cert: str = _text()  # certificate presented to the peer (with client_key)
    client_key: str = _text()


@dataclass(frozen=True, slots=True, kw_only=True)
class LandingDeclaration:
    """A ``[[landings]]`` table: a queue written out as immutable files (Parquet or JSON
    Lines) into a directory that Spark's file source reads (``gateway.outbound.landing``)."""

    queue: str = _str("")
    directory: str = _str("")
    format: str = _choice("parquet", "parquet", "jsonl")
    consumer: str = _str("landing")  # its registered range consumer on the queue
    file_messages: int = _int(10_000, low=1, high=100_000)
    file_bytes: int = _size("64MiB", low="1KiB", high="1GiB")
    file_delay: float = _duration("5s", low="10ms", high="1h")


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionSettings:
    """Explicit transactions (REST /v1/transactions)."""

    idle_timeout: float = _duration("60s", low="100ms", high="1d")
    open_max: int = _int(10_000, low=1, high=1_000_000)
    # One principal's share of open_max, so one partner cannot take them all.
    open_max_per_principal: int = _int(1000, low=1, high=1_000_000)
    messages_max: int = _int(10_000, low=1, high=1_000_000)
    bytes_max: int = _size("64MiB", low="1KiB", high="4GiB")
    # Bodies held in memory by all active transactions, and by one principal's.
    pending_bytes_max: int = _size("512MiB", low="1KiB", high="64GiB")
    pending_bytes_max_per_principal: int = _size("128MiB", low="1KiB", high="64GiB")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSettings:
    """Logging: human lines or JSON lines on stderr (journald under systemd)."""

    format: str = _choice("text", "text", "json")
    level: str = _choice("info", "debug", "info", "warning", "error")
    access: bool = _bool(False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSettings:
    """``/metrics``: how many label values senders can make (each one is a series to store)."""

    # Queues (and links) counted under their own label; the rest are summed under "_other".
    queues_max: int = _int(100, low=1, high=10_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDeclaration:
    """A ``[[queues]]`` table: a queue created at start when it does not exist yet."""

    path: str = _str("")
    transactional: bool = _bool(False)
    quota: int = _size("0B", low="0B", high="64TiB")
    journal: bool = _bool(False)
    journal_quota: int = _size("0B", low="0B", high="64TiB")
    label: str = field(default="", metadata={"spec": _Spec("label")})
    anonymous: bool = _bool(False)
    authenticate: bool = _bool(False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The whole configuration, one section per table of the TOML file."""

    server: ServerSettings = field(default_factory=ServerSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    mapping: MappingSettings = field(default_factory=MappingSettings)
    srmp: SrmpSettings = field(default_factory=SrmpSettings)
    links: LinkSettings = field(default_factory=LinkSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    outbound: OutboundSettings = field(default_factory=OutboundSettings)
    transactions: TransactionSettings = field(default_factory=TransactionSettings)
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    queues: tuple[QueueDeclaration, ...] = ()
    partners: tuple[PartnerDeclaration, ...] = ()
    webhooks: tuple[WebhookDeclaration, ...] = ()
    landings: tuple[LandingDeclaration, ...] = ()
    peers: tuple[PeerDeclaration, ...] = ()


def parse_settings(
    doc: Mapping[str, object], overrides: Mapping[str, object] | None = None
) -> Settings:
    """Build ``Settings`` from a parsed TOML document plus dotted-key overrides.

    Args:
        doc: the TOML document as ``tomllib`` returns it.
        overrides: ``{"server.listen": "0.0.0.0:80"}`` from the command line; they win.

    Raises:
        ConfigError: an unknown key, a wrong type or a value out of range; the message starts
            with the full key path.
    """
    merged: dict[str, dict[str, object]] = {}
    queues: tuple[QueueDeclaration, ...] = ()
    partners: tuple[PartnerDeclaration, ...] = ()
    webhooks: tuple[WebhookDeclaration, ...] = ()
    landings: tuple[LandingDeclaration, ...] = ()
    peers: tuple[PeerDeclaration, ...] = ()
    for section_name, table in doc.items():
        if section_name == "peers":
            peers = tuple(_array_of_tables("peers", "url", PeerDeclaration, table))
            for index, peer in enumerate(peers):
                _http_url(f"peers[{index}].url", peer.url)
                if bool(peer.client_cert) != bool(peer.client_key):
                    raise ConfigError(f"peers[{index}].client_cert and client_key: set both "
                                      "or neither")
            continue
        if section_name == "webhooks":
            webhooks = tuple(_array_of_tables("webhooks", "url", WebhookDeclaration, table))
            for index, hook in enumerate(webhooks):
                _http_url(f"webhooks[{index}].url", hook.url)
            continue
        if section_name == "landings":
            landings = _parse_landings(table)
            continue
        if section_name == "queues":
            queues = _parse_queues(table)
            continue
        if section_name == "partners":
            partners = _parse_partners(table)
            continue
        if section_name not in _SECTIONS:
            known = ", ".join([*_SECTIONS, *(f"[[{name}]]" for name in _ARRAYS)])
            raise ConfigError(f"{section_name}: unknown section (known: {known})")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{section_name}: expected a table, got {_kind_of(table)}")
        merged[section_name] = dict(table)
    for dotted, value in (overrides or {}).items():
        section_name, _, key = dotted.partition(".")
        merged.setdefault(section_name, {})[key] = value
    sections: dict[str, Any] = {
        name: _parse_section(name, merged.get(name, {})) for name in _SECTIONS
    }
    settings = Settings(**sections, queues=queues, partners=partners, webhooks=webhooks,
                        landings=landings, peers=peers)
    _check_relations(settings)
    return settings


def load_settings(path: Path | None, overrides: Mapping[str, object] | None = None) -> Settings:
    """Read ``path`` (or nothing: built-in defaults) and parse it.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or holds a bad value.
    """
    doc: dict[str, object] = {}
    if path is not None:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_settings(doc, overrides)


_SECTIONS: dict[str, type[Any]] = {
    "server": ServerSettings,
    "store": StoreSettings,
    "mapping": MappingSettings,
    "srmp": SrmpSettings,
    "links": LinkSettings,
    "auth": AuthSettings,
    "outbound": OutboundSettings,
    "transactions": TransactionSettings,
    "log": LogSettings,
    "metrics": MetricsSettings,
}


def _parse_section(name: str, table: Mapping[str, object]) -> object:
    return _parse_table(name, _SECTIONS[name], table)


def _parse_table(prefix: str, cls: type[Any], table: Mapping[str, object]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    for key, raw in table.items():
        path = f"{prefix}.{key}"
        if key not in fields:
            raise ConfigError(f"{path}: unknown key (known in [{prefix}]: {', '.join(fields)})")
        values[key] = _convert(path, fields[key].metadata["spec"], raw)
    return cls(**values)


_ARRAYS = ("queues", "partners", "peers", "webhooks", "landings")


def _http_url(key: str, text: str) -> None:
    """Raises: ConfigError unless ``text`` is an http(s) URL with a host (or such a prefix
    ending in ``*``)."""
    parts = urlsplit(text.removesuffix("*"))
    try:
        parts.port  # noqa: B018 (a port that is not a number raises)
    except ValueError:
        raise ConfigError(f"{key}: {text!r} has a port that is not a number") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}: {text!r} is not an http(s) URL such as "
                          "\"https://host.example/msmq\"")


def _array_of_tables(name: str, key: str, cls: type[Any], raw: object) -> list[Any]:
    """``[[name]]`` tables, each parsed as ``cls``, each required to have ``key``."""
    if not isinstance(raw, list):
        raise ConfigError(f"{name}: expected an array of tables ([[{name}]]), "
                          f"got {_kind_of(raw)}")
    out = []
    for index, table in enumerate(raw):
        prefix = f"{name}[{index}]"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{prefix}: expected a table, got {_kind_of(table)}")
        if key not in table:
            raise ConfigError(f"{prefix}.{key}: missing (every entry of [[{name}]] needs one)")
        out.append(_parse_table(prefix, cls, table))
    return out


def _parse_landings(raw: object) -> tuple[LandingDeclaration, ...]:
    """``[[landings]]``: a valid queue path and a directory each, directories distinct."""
    declared = _array_of_tables("landings", "queue", LandingDeclaration, raw)
    directories: set[str] = set()
    for index, landing in enumerate(declared):
        prefix = f"landings[{index}]"
        try:
            parse_queue_path(landing.queue)
        except QueueNameError as exc:
            raise ConfigError(f"{prefix}.queue: {exc}") from None
        if not landing.directory:
            raise ConfigError(f"{prefix}.directory: missing (where the files land)")
        if landing.directory in directories:
            raise ConfigError(f"{prefix}.directory: {landing.directory!r} is used twice")
        directories.add(landing.directory)
        if not CONSUMER_NAME.match(landing.consumer):
            raise ConfigError(f"{prefix}.consumer: {landing.consumer!r}: {CONSUMER_NAME_RULE}")
    return tuple(declared)


def _parse_queues(raw: object) -> tuple[QueueDeclaration, ...]:
    """``[[queues]]`` tables: queues created at start when missing."""
    seen: set[str] = set()
    declared = _array_of_tables("queues", "path", QueueDeclaration, raw)
    for index, declaration in enumerate(declared):
        try:
            canonical = parse_queue_path(declaration.path).canonical
        except QueueNameError as exc:
            raise ConfigError(f"queues[{index}].path: {exc}") from exc
        if canonical in seen:
            raise ConfigError(f"queues[{index}].path: {declaration.path!r} is declared twice")
        seen.add(canonical)
    return tuple(declared)


def _parse_partners(raw: object) -> tuple[PartnerDeclaration, ...]:
    """``[[partners]]`` tables: names unique, at least one credential each."""
    declared = _array_of_tables("partners", "name", PartnerDeclaration, raw)
    for index, partner in enumerate(declared):
        prefix = f"partners[{index}]"
        if any(p.name == partner.name for p in declared[:index]):
            raise ConfigError(f"{prefix}.name: {partner.name!r} is declared twice")
        if not (partner.api_key_sha256 or partner.hmac_secret_file or partner.cert_subject):
            raise ConfigError(f"{prefix}: partner {partner.name!r} has no credential "
                              "(api_key_sha256, hmac_secret_file or cert_subject)")
    return tuple(declared)


def _check_relations(settings: Settings) -> None:
    server = settings.server
    if settings.srmp.public_url:
        _http_url("srmp.public_url", settings.srmp.public_url)
    if bool(server.tls_cert) != bool(server.tls_key):
        raise ConfigError("server.tls_cert and server.tls_key: set both (TLS) or neither")
    if server.tls_client_ca and not server.tls_cert:
        raise ConfigError("server.tls_client_ca: client certificates need TLS (server.tls_cert)")
    store = settings.store
    if store.segment_size % 4096:
        raise ConfigError(f"store.segment_size: {store.segment_size} bytes is not a multiple "
                          "of 4 KiB (4096 bytes)")
    if store.group_commit_bytes_max > store.segment_size:
        raise ConfigError(
            f"store.group_commit_bytes_max: {store.group_commit_bytes_max} bytes is larger than "
            f"store.segment_size ({store.segment_size} bytes)"
        )
    if store.segment_size > store.machine_quota:
        raise ConfigError(
            f"store.machine_quota: {store.machine_quota} bytes is smaller than one segment "
            f"(store.segment_size = {store.segment_size} bytes)"
        )
