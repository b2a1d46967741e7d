"""The ``entrepot`` command line: one entry point, one subcommand per job.

Exit codes: 0 success, 1 the command ran and found a problem (``check``), 2 bad usage, bad
configuration or a start-up failure (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.cli.config import DEFAULT_CONFIG, config_path
from gateway.errors import GatewayError, StartupError
from gateway.logs import configure_logging
from gateway.settings import Settings, load_settings, parse_listen

__all__ = ["main", "build_parser"]



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="entrepot",
        description="HTTP store-and-forward gateway for MSMQ (SRMP) and REST.",
    )
    parser.add_argument("--version", action="version", version=f"entrepot {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway. With no flags: 127.0.0.1:8080, data under ./var/entrepot, "
        "config/entrepot.toml when present (else built-in defaults).",
    )
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="TOML configuration file (default: $ENTREPOT_CONFIG, then "
                       f"{DEFAULT_CONFIG} if it exists)")
    serve.add_argument("--listen", type=_listen_arg, metavar="HOST:PORT",
                       help="address to listen on (overrides server.listen)")
    serve.add_argument("--data-dir", metavar="DIR",
                       help="data directory (overrides store.data_dir)")
    serve.add_argument("--mapping-dir", metavar="DIR",
                       help="mapping files directory (overrides mapping.dir)")
    serve.add_argument("--log-format", choices=("text", "json"),
                       help="log lines for people or JSON lines (overrides log.format)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                       help="overrides log.level")
    serve.add_argument("--workers", type=int, metavar="N",
                       help="HTTP front processes around the one that owns the store; 1 "
                       "serves everything in one process, 0 one front per usable CPU "
                       "(overrides server.workers; default 0)")
    serve.add_argument("--links-paused", action="store_const", const=True,
                       help="start every link and receipt lane paused, to inspect a restored "
                       "copy without forwarding (sets links.start_paused)")
    serve.set_defaults(handler=_cmd_serve)

    check = commands.add_parser(
        "check",
        help="verify every record of a stopped gateway's data directory",
        description="Verify every record, checkpoint and segment header of DATA_DIR (the "
        "gateway must be stopped), and name each internal-queue record a start would "
        "quarantine. Exit 0 when all is whole, 1 when anything is damaged or to quarantine.",
    )
    check.add_argument("data_dir", type=Path, metavar="DATA_DIR")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=_cmd_check)

    backup = commands.add_parser(
        "backup",
        help="take a consistent backup of a data directory (also while the gateway runs)",
        description="Copy DATA_DIR's store into DEST (new or empty) with a manifest of "
        "SHA-256 checksums. When a gateway holds DATA_DIR, it is asked to take the backup.",
    )
    backup.add_argument("data_dir", type=Path, metavar="DATA_DIR")
    backup.add_argument("dest", type=Path, metavar="DEST")
    backup.add_argument("--token", help="the admin key, for a running gateway with "
                        "credentials (default $ENTREPOT_TOKEN, else $ENTREPOT_ADMIN_KEY)")
    backup.add_argument("--token-file", type=Path, help="file holding the admin key")
    backup.epilog = ("exit codes: 0 done, 1 the running gateway refused or the copy failed "
                     "(DEST left as it was; the reason on stderr), 2 not a data directory, "
                     "DEST not empty or inside DATA_DIR, 3 the gateway cannot be reached")
    backup.set_defaults(handler=_cmd_backup)

    restore = commands.add_parser(
        "restore",
        help="restore a backup into an empty data directory and verify it",
        description="Verify every file of the backup SRC against its manifest, copy it into "
        "DATA_DIR (new or empty), and open the store once to verify its records.",
    )
    restore.add_argument("src", type=Path, metavar="SRC")
    restore.add_argument("data_dir", type=Path, metavar="DATA_DIR")
    restore.epilog = ("exit codes: 0 done, 1 the copy failed (DATA_DIR left as it was) or "
                      "records are damaged, 2 a backup that is not one or fails its "
                      "checksums, or DATA_DIR not empty")
    restore.set_defaults(handler=_cmd_restore)

    from gateway.cli import admin as admin_cli
    from gateway.cli import health as health_cli
    from gateway.cli import mapping as mapping_cli
    from gateway.cli import security as security_cli
    from gateway.spark import cli as spark_cli

    health_cli.add_commands(commands, DEFAULT_CONFIG)
    admin_cli.add_commands(commands, DEFAULT_CONFIG)
    mapping_cli.add_commands(commands, DEFAULT_CONFIG)
    security_cli.add_commands(commands)
    spark_cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except GatewayError as exc:
        print(f"entrepot: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``entrepot dlq show ID | head``): nothing more to print, and
        # no traceback. Python's own flush at exit would raise again on the closed pipe. The
        # status is a shell's for a process SIGPIPE stopped (128 + 13), as for other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


def _cmd_serve(args: argparse.Namespace) -> int:
    from gateway.cli.serve import serve
    from gateway.credentials import resolve_credentials

    settings, source = _load(args)
    settings = resolve_credentials(settings, os.environ.get("CREDENTIALS_DIRECTORY"))
    configure_logging(fmt=settings.log.format, level=settings.log.level)
    return serve(settings, config_source=source)


def _cmd_check(args: argparse.Namespace) -> int:
    from gateway.cli.offline import run_check

    return run_check(args.data_dir, as_json=args.json)


def _cmd_backup(args: argparse.Namespace) -> int:
    from gateway.cli.offline import run_backup

    token = (args.token or os.environ.get("ENTREPOT_TOKEN")
             or os.environ.get("ENTREPOT_ADMIN_KEY", ""))
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as exc:
            raise StartupError(f"--token-file {args.token_file}: {exc.strerror}") from None
    return run_backup(args.data_dir, args.dest, token=token)


def _cmd_restore(args: argparse.Namespace) -> int:
    from gateway.cli.offline import run_restore

    return run_restore(args.src, args.data_dir)


def _load(args: argparse.Namespace) -> tuple[Settings, str]:
    """Apply the precedence built-in < file < flags, and say where the file came from."""
    path = config_path(args.config, DEFAULT_CONFIG)
    overrides: dict[str, object] = {}
    for flag, key in (
        ("listen", "server.listen"),
        ("data_dir", "store.data_dir"),
        ("mapping_dir", "mapping.dir"),
        ("log_format", "log.format"),
        ("log_level", "log.level"),
        ("links_paused", "links.start_paused"),
        ("workers", "server.workers"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            overrides[key] = value
    settings = load_settings(path, overrides)
    return settings, str(path) if path is not None else "(built-in defaults)"


def _listen_arg(text: str) -> str:
    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("entrepot")
    except PackageNotFoundError:
        return "unknown"
