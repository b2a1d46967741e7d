"""The application factory: routes, middlewares, and one cleanup context per resource."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

from aiohttp import web

from gateway.auth.authenticator import Authenticator, read_secret
from gateway.auth.nonce_file import load_nonces, save_nonces
from gateway.auth.outbound import OutboundPolicy
from gateway.errors import ConfigError, GatewayError
from gateway.inbound.parse_pool import ParsePool
from gateway.inbound.sequencer import StreamSequencer
from gateway.inbound.signers import load_signers
from gateway.inbound.streams import IncomingStreams
from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.outbound.landing import Landing, LandingSpec
from gateway.outbound.link import LinkOptions
from gateway.outbound.links import Links
from gateway.outbound.outbox import Outbox
from gateway.outbound.peers import load_peers
from gateway.outbound.receipt_gate import ReceiptGate
from gateway.outbound.receipt_sender import ReceiptSender
from gateway.queues.identity import load_guid
from gateway.queues.internal import not_creatable
from gateway.queues.local_names import LocalNames, local_host_names
from gateway.queues.manager import QueueManager, QueueSettings
from gateway.queues.range_consumers import RangeConsumers
from gateway.queues.redrive import Redrive
from gateway.queues.transactions import Transactions
from gateway.settings import Settings, StoreSettings
from gateway.web import (
    admin,
    health,
    openapi,
    queue_admin,
    rest_links,
    rest_messages,
    rest_queues,
    rest_tx,
    ui,
)
from gateway.web.appkeys import (
    AUTHENTICATOR_KEY,
    FILE_OPS_KEY,
    METRICS_KEY,
    PARSE_POOL_KEY,
    SETTINGS_KEY,
    SIGNERS_KEY,
    STATE_KEY,
)
from gateway.web.auth_middleware import make_auth_gate
from gateway.web.expect import defer_continue
from gateway.web.long_polls import LONG_POLLS_KEY, LongPolls
from gateway.web.metrics_state import StateCollector
from gateway.web.middlewares import make_middlewares
from gateway.web.partner_shares import PartnerShares
from gateway.web.queue_access import authorize_early
from gateway.web.srmp_routes import add_srmp_routes
from gateway.web.state import GatewayState, Services
from gateway.web.status import DeadLetterClasses, MessageRates, RecentErrors
from mapping.loader import MappingLoader
from mapping.names import parse_queue_path
from store.errors import StoreError
from store.fileops import FileOps, RealFileOps
from store.message_store import MessageStore
from store.options import StoreOptions

__all__ = ["ROUTE_TABLES", "make_app", "store_options"]

# Every route but SRMP's (one a virtual directory: add_srmp_routes); a front process
# (gateway.fronts) builds the same router, so that routes and their metric labels match.
ROUTE_TABLES = (health.routes, admin.routes, openapi.routes, rest_tx.routes,
                rest_messages.routes, rest_links.routes, queue_admin.routes, rest_queues.routes,
                ui.routes)


def store_options(settings: StoreSettings) -> StoreOptions:
    """Translate the store section of the settings into the store's own options."""
    return StoreOptions(
        segment_size=settings.segment_size,
        machine_quota=settings.machine_quota,
        machine_journal_quota=settings.machine_journal_quota,
        express_memory=settings.express_memory,
        cleanup_interval_s=settings.cleanup_interval,
        archive_segments=settings.archive_segments,
        checkpoint_interval_s=settings.checkpoint_interval,
        qmlog_size=settings.qmlog_size,
        group_commit_bytes_max=settings.group_commit_bytes_max,
        audit_interval_s=settings.audit_interval,
    )


def make_app(settings: Settings, *, file_ops: FileOps | None = None,
             behind_fronts: bool = False) -> web.Application:
    """Build the gateway application; nothing is opened until the app starts.

    ``file_ops`` is the store's file seam (tests inject faults through it).
    ``behind_fronts``: the store owner's app, which serves no HTTP: it runs the commands
    its front processes send (gateway.fronts.commands).
    """
    metrics = Metrics()
    load_webhooks(settings)  # a webhook's unreadable secret stops the start (exit 2)
    landing_specs(settings)  # so does a Parquet landing without pyarrow
    load_peers(settings)  # and a peer's TLS files that cannot be loaded
    _check_declared_queues(settings)  # and a [[queues]] path no client may create
    authenticator = Authenticator(settings)
    shares = PartnerShares(settings.server.concurrent_requests_max)
    gate = make_auth_gate(settings, authenticator, shares, before_body=authorize_early)
    long_polls = LongPolls(settings.server.long_polls_max)
    metrics.http_long_polls.set_function(lambda: long_polls.parked)
    app = web.Application(
        client_max_size=settings.server.request_body_max,
        # Behind fronts the app serves no HTTP: its fronts send it commands (gateway.fronts).
        middlewares=[] if behind_fronts else make_middlewares(
            metrics, concurrent_requests_max=settings.server.concurrent_requests_max, gate=gate,
            long_polls=long_polls, answer_timeout=settings.server.body_timeout, shares=shares),
    )
    app[AUTHENTICATOR_KEY] = authenticator
    app[LONG_POLLS_KEY] = long_polls
    app[SETTINGS_KEY] = settings
    app[METRICS_KEY] = metrics
    state = app[STATE_KEY] = GatewayState(
        local=local_host_names(settings.server.names, settings.server.host,
                               settings.server.port, settings.srmp.virtual_dirs))
    state.outbound = OutboundPolicy(
        [*settings.outbound.allow, *(p.url for p in settings.peers),
         *(w.url for w in settings.webhooks)],
        lambda: state.mapping.rules if state.mapping is not None else None,
        lambda: state.services.links.destinations() if state.services is not None else ())
    app[FILE_OPS_KEY] = file_ops or RealFileOps()
    app[SIGNERS_KEY] = load_signers(settings.srmp.signers_dir)
    # Behind fronts, the fronts parse SRMP requests: none reaches this app as HTTP.
    workers = 0 if behind_fronts else settings.srmp.parse_workers
    app[PARSE_POOL_KEY] = (ParsePool(workers, metrics.srmp_parse_workers_started.inc)
                           if workers else None)
    for table in ROUTE_TABLES:
        for route in table:  # each with the expect handler that waits for the gate
            assert isinstance(route, web.RouteDef)
            web.RouteDef(route.method, route.path, route.handler,
                         {**route.kwargs, "expect_handler": defer_continue}
                         ).register(app.router)
    add_srmp_routes(app, settings.srmp.virtual_dirs)
    app[ui.UI_DEAD] = DeadLetterClasses()
    app[ui.UI_ERRORS] = RecentErrors()
    app[ui.UI_RATES] = MessageRates()
    metrics.registry.register(StateCollector(app[STATE_KEY], app[ui.UI_DEAD]))
    app.cleanup_ctx.append(_errors_ctx)
    app.cleanup_ctx.append(_nonces_ctx)
    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(_mapping_ctx)
    app.cleanup_ctx.append(_parse_pool_ctx)
    return app


def _check_declared_queues(settings: Settings) -> None:
    """Raises: ConfigError naming a ``[[queues]]`` path the queue manager would refuse, which
    would otherwise stop the store once it opens, not the start."""
    for index, declared in enumerate(settings.queues):
        if not_creatable(parse_queue_path(declared.path)):  # a valid path: settings checked
            raise ConfigError(f"queues[{index}].path: {declared.path!r} is a system queue, a "
                              "journal or a name the gateway keeps for its own queues")


async def _parse_pool_ctx(app: web.Application) -> AsyncIterator[None]:
    """The SRMP parse workers start on first use; they are stopped with the app."""
    yield
    pool = app[PARSE_POOL_KEY]
    if pool is not None:
        await pool.close()


async def _errors_ctx(app: web.Application) -> AsyncIterator[None]:
    """Collect recent warnings and errors for the status page while the app runs."""
    handler = app[ui.UI_ERRORS]
    logging.getLogger().addHandler(handler)
    yield
    logging.getLogger().removeHandler(handler)


async def _nonces_ctx(app: web.Application) -> AsyncIterator[None]:
    """Signature nonces across a restart (gateway.auth.nonce_file)."""
    data_dir = Path(app[SETTINGS_KEY].store.data_dir)
    load_nonces(app[AUTHENTICATOR_KEY], data_dir)
    yield
    save_nonces(app[AUTHENTICATOR_KEY], data_dir)


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    """Open (and recover) the store in the background so /healthz answers meanwhile."""
    state = app[STATE_KEY]
    settings = app[SETTINGS_KEY]
    opener = asyncio.create_task(_open_store(app), name="store-open")
    yield
    state.stopping = True
    state.ready = False
    app[METRICS_KEY].ready.set(0)
    for task in state.tasks:
        task.cancel()
    await asyncio.gather(*state.tasks, return_exceptions=True)
    await _stop_srmp(state)
    if not opener.done():
        # The open runs in a thread and cannot be interrupted; wait for it so the lock is
        # released in order.
        await asyncio.wait({opener})
    if state.store is not None:
        store, state.store = state.store, None
        await asyncio.get_running_loop().run_in_executor(None, store.close)
        server_log.info("store closed data_dir=%s", settings.store.data_dir)


async def _mapping_ctx(app: web.Application) -> AsyncIterator[None]:
    """Load the mapping files, then reload them on change and on SIGHUP (SIGHUP sets
    ``state.reload_mapping``); each reload replaces the rule set in one assignment."""
    state = app[STATE_KEY]
    settings = app[SETTINGS_KEY]
    loader = MappingLoader(Path(settings.mapping.dir))
    state.mapping = loader
    loop = asyncio.get_running_loop()

    async def reload() -> None:
        await loop.run_in_executor(None, loader.load)

    async def watch() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.reload_mapping.wait(),
                                       settings.mapping.reload_interval)
            asked = state.reload_mapping.is_set()
            state.reload_mapping.clear()
            if asked or await loop.run_in_executor(None, loader.changed):
                await reload()
                server_log.info("mapping reloaded dir=%s files=%d rejected=%d",
                                settings.mapping.dir, len(loader.rules.files),
                                loader.rejected_total)

    await reload()
    if not Path(settings.mapping.dir).is_dir():  # a mistyped --mapping-dir: said, not silent
        server_log.warning("mapping directory %s does not exist: no mapping rules are loaded "
                           "(mapping.dir, --mapping-dir)", Path(settings.mapping.dir).resolve())
    watcher = asyncio.create_task(watch(), name="mapping-watch")
    yield
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


def load_webhooks(settings: Settings) -> list[tuple[str, str, bytes]]:
    """Raises: ConfigError when a webhook's secret file cannot be read."""
    out = []
    for index, hook in enumerate(settings.webhooks):
        secret = (read_secret(hook.hmac_secret_file, f"webhooks[{index}].hmac_secret_file")
                  if hook.hmac_secret_file else b"")
        out.append((hook.url, hook.name, secret))
    return out


def landing_specs(settings: Settings) -> list[LandingSpec]:
    """Raises: ConfigError when a Parquet landing cannot import pyarrow."""
    specs = []
    for index, landing in enumerate(settings.landings):
        if landing.format == "parquet":
            try:
                import pyarrow.parquet  # noqa: F401 - only to know it is there
            except ImportError:
                raise ConfigError(f"landings[{index}].format: parquet needs pyarrow (pip "
                                  "install 'entrepot[spark]') or use format = \"jsonl\"")
        specs.append(LandingSpec(landing.queue, Path(landing.directory), landing.format,
                                 landing.consumer, landing.file_messages, landing.file_bytes,
                                 landing.file_delay))
    return specs


def link_options(settings: Settings) -> LinkOptions:
    links, server = settings.links, settings.server
    host = server.names[0] if server.names else server.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    scheme = "https" if server.tls_cert else "http"
    return LinkOptions(request_timeout_s=links.request_timeout,
                       idle_timeout_s=links.idle_timeout, retry_max_s=links.retry_max,
                       resend_s=links.resend, stream_element=links.stream_element,
                       window=links.window,
                       restart_after_rounds=links.restart_stream_after,
                       public_url=(settings.srmp.public_url.rstrip("/")
                                   or f"{scheme}://{host}:{server.port}"))


async def _stop_srmp(state: GatewayState) -> None:
    """Stop the links, checkpoint the incoming streams (a faster next start), stop sending
    receipts."""
    services = state.services
    if services is None:
        return
    await services.links.close()
    if services.store.failed is None:
        try:
            await services.streams.checkpoint()
        except (StoreError, OSError) as exc:
            server_log.warning("incoming streams not checkpointed at stop: %s", exc)
    await services.receipts.close()


async def _open_store(app: web.Application) -> None:
    """Open and recover the store, build the services on it, start their tasks, then say
    ready. A store or queue manager that cannot start leaves the gateway up and not ready,
    saying why at once (the log, /readyz, the status page), whatever the error."""
    state = app[STATE_KEY]
    try:
        await _open_store_steps(app)
    except Exception as exc:  # not foreseen below: said, not left in a dead task
        state.failure = f"{type(exc).__name__}: {exc}"
        server_log.critical("the gateway cannot serve: %s", state.failure, exc_info=exc)


async def _open_store_steps(app: web.Application) -> None:
    state = app[STATE_KEY]
    settings = app[SETTINGS_KEY]
    loop = asyncio.get_running_loop()
    try:
        store = await loop.run_in_executor(
            None, partial(MessageStore.open, Path(settings.store.data_dir),
                          store_options(settings.store), ops=app[FILE_OPS_KEY]))
    except (StoreError, OSError) as exc:  # OSError: a full disk while the files are made
        state.failure = str(exc)
        server_log.critical("store cannot be opened: %s", exc)
        return
    store.start(loop)
    state.store = store
    try:
        queue_manager, consumers = await _open_queues(store, settings, state.local)
    except (OSError, ValueError, KeyError, StoreError, GatewayError) as exc:
        state.failure = f"queue manager cannot start: {exc}"
        server_log.critical("%s", state.failure)
        return
    services = await _build_services(app, store, queue_manager, consumers)
    state.services = services  # from here on, the stop closes links and receipts
    services.links.start()
    await services.links.outgoing.drop_stale()
    _start_tasks(state, services, app[METRICS_KEY])
    try:
        await queue_manager.quarantine.flush()
    except (OSError, StoreError) as exc:  # the records stay; the next start tries again
        server_log.error("unreadable state records not set aside: %s", exc)
    if state.stopping:
        return
    state.ready = True
    app[METRICS_KEY].ready.set(1)
    server_log.info("store ready data_dir=%s", settings.store.data_dir)


async def _open_queues(store: MessageStore, settings: Settings, local: LocalNames
                       ) -> tuple[QueueManager, RangeConsumers]:
    """The queue manager on the recovered store, with the declared queues and the range
    consumers' positions."""
    loop = asyncio.get_running_loop()
    guid = await loop.run_in_executor(None, load_guid, Path(settings.store.data_dir))
    queue_manager = QueueManager(store, guid)
    queue_manager.local_names = local
    queue_manager.events.names_max = settings.metrics.queues_max
    await queue_manager.open([
        (q.path, QueueSettings(transactional=q.transactional, quota=q.quota,
                               journal=q.journal, journal_quota=q.journal_quota,
                               label=q.label, anonymous=q.anonymous,
                               authenticate=q.authenticate))
        for q in settings.queues])
    consumers = RangeConsumers(queue_manager)
    await consumers.start()
    return queue_manager, consumers


async def _build_services(app: web.Application, store: MessageStore,
                          queue_manager: QueueManager, consumers: RangeConsumers) -> Services:
    """Everything that serves on the queue manager, wired together; nothing runs yet."""
    state, settings, metrics = app[STATE_KEY], app[SETTINGS_KEY], app[METRICS_KEY]
    tx_settings = settings.transactions
    transactions = Transactions(
        queue_manager, idle_timeout_s=tx_settings.idle_timeout, open_max=tx_settings.open_max,
        open_max_per_principal=tx_settings.open_max_per_principal,
        sends_max=tx_settings.messages_max, bytes_max=tx_settings.bytes_max,
        pending_bytes_max=tx_settings.pending_bytes_max,
        pending_bytes_max_per_principal=tx_settings.pending_bytes_max_per_principal)
    await transactions.restore_prepared({p.name for p in settings.partners})
    srmp = settings.srmp
    # Links first: receipts take their routes, back-off and listing
    # (gateway.outbound.receipt_lanes).
    links = Links(queue_manager, link_options(settings), metrics,
                  lambda: state.mapping.rules if state.mapping is not None else None,
                  webhooks=load_webhooks(settings), peers=load_peers(settings),
                  paused=settings.links.start_paused)
    links.counts.names_max = settings.metrics.queues_max
    receipts = ReceiptSender(metrics, links.receipts, timeout_s=srmp.receipt_timeout,
                             attempts=srmp.receipt_attempts,
                             pending_max=srmp.receipts_pending_max,
                             gate=ReceiptGate(state.outbound, metrics,
                                              rate=settings.outbound.receipts_rate,
                                              burst=settings.outbound.receipts_burst))
    ids = queue_manager.wire_ids
    assert ids is not None
    streams = IncomingStreams(queue_manager, receipts, ids, metrics,
                              streams_max=srmp.streams_max,
                              checkpoint_interval_s=srmp.stream_checkpoint_interval)
    sequencer = StreamSequencer(queue_manager, streams, reorder_wait_s=srmp.reorder_wait,
                                window=srmp.reorder_window)
    landings = tuple(Landing(queue_manager, consumers, spec)
                     for spec in landing_specs(settings))
    return Services(store=store, queue_manager=queue_manager, transactions=transactions,
                    redrive=Redrive(queue_manager), consumers=consumers, links=links,
                    receipts=receipts, streams=streams, sequencer=sequencer,
                    landings=landings)


def _start_tasks(state: GatewayState, services: Services, metrics: Metrics) -> None:
    """The services' background work: the outbox, stream receipts and checkpoints,
    the transaction reaper, landings, expiry and the duplicate window; the store's stop
    cancels them (``state.tasks``)."""
    queue_manager, streams = services.queue_manager, services.streams
    dedup, ids = queue_manager.dedup, queue_manager.wire_ids
    assert dedup is not None and ids is not None
    outbox = Outbox(queue_manager, services.receipts, ids, metrics)
    work = [(outbox.run(), "srmp-outbox"), (streams.run_receipts(), "srmp-receipts"),
            (streams.run_checkpoints(), "srmp-checkpoints"),
            (services.transactions.reap(), "transaction-reaper"),
            *((landing.run(), f"landing {landing.spec.queue}")
              for landing in services.landings),
            (queue_manager.expiry.run(), "expiry"), (dedup.run(), "dedup-trim"),
            (dedup.run_flusher(), "dedup-flush")]
    state.tasks.extend(asyncio.create_task(coroutine, name=name) for coroutine, name in work)
