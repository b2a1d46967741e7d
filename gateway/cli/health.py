"""``entrepot health``: is the gateway this configuration describes ready?

The container's HEALTHCHECK: it reads the configuration ``entrepot serve`` reads (``--config``,
``$ENTREPOT_CONFIG``, then config/entrepot.toml) and asks ``/readyz`` on that listener, over
https when ``server.tls_cert`` is set, on loopback when it listens on every address. Python
only: the image needs no curl. Exit 0 ready, 1 anything else (not ready, unreachable, a bad
configuration): Docker reserves 2.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gateway.cli.admin_client import AdminError, ca_context
from gateway.cli.config import config_path
from gateway.errors import GatewayError
from gateway.settings import ServerSettings, Settings, load_settings, parse_listen

__all__ = ["add_commands", "readyz_url"]

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def add_commands(commands: Any, default_config: Path) -> None:
    parser = commands.add_parser(
        "health",
        help="exit 0 when the configured gateway answers /readyz with 200 (health checks)",
        description="Ask /readyz of the gateway the configuration describes (server.listen; "
        "https when server.tls_cert is set). Exit 0 when ready, 1 otherwise.",
    )
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML configuration file (default: $ENTREPOT_CONFIG, then "
                        f"{default_config} if it exists)")
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help="the --listen given to serve, when it overrides server.listen")
    parser.add_argument("--cafile", type=Path, metavar="FILE",
                        help="verify the https listener's certificate against this bundle "
                        "(default: not verified; the probe sends nothing and reads a status)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S",
                        help="seconds to wait for the answer (default 5)")
    parser.set_defaults(handler=_cmd_health, default_config=default_config)


def readyz_url(server: ServerSettings) -> str:
    """The /readyz URL of ``server``'s listener as seen from this machine."""
    host, port = parse_listen(server.listen)
    host = _WILDCARDS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if server.tls_cert else 'http'}://{host}:{port}/readyz"


def _cmd_health(args: argparse.Namespace) -> int:
    try:
        server = _settings(args).server
    except GatewayError as exc:
        print(f"entrepot health: {exc}", file=sys.stderr)
        return 1
    url = readyz_url(server)
    context = None
    if url.startswith("https:"):
        try:
            context = ca_context(str(args.cafile or "")) or ssl.create_default_context()
        except AdminError as exc:
            print(f"entrepot health: {exc}", file=sys.stderr)
            return 1
        if args.cafile is None:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=args.timeout, context=context) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        print(f"{url}: not ready ({exc.code}): {_detail(exc.read())}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"{url}: cannot reach the gateway: {reason}", file=sys.stderr)
        return 1
    print(f"{url}: ready")
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    """Serve's precedence: --config, then $ENTREPOT_CONFIG, then the default file if any.
    Credentials are not resolved: the listener and whether TLS is on are all it needs."""
    path = config_path(args.config, args.default_config)
    overrides = {"server.listen": args.listen} if args.listen else None
    return load_settings(path, overrides)


def _detail(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    return str(doc.get("detail", doc)) if isinstance(doc, dict) else str(doc)
