"""``entrepot mapping check [DIR]`` and ``entrepot mapping explain URL``."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from gateway.cli.config import config_path
from gateway.errors import StartupError
from gateway.settings import load_settings
from mapping.engine import receipt_url_for, route_inbound, route_outbound
from mapping.loader import LoadReport, MappingLoader
from mapping.rules import Pattern

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                 default_config: Path) -> None:
    mapping = commands.add_parser("mapping", help="check mapping files, explain an address")
    sub = mapping.add_subparsers(dest="mapping_command", metavar="COMMAND", required=True)
    check = sub.add_parser("check", help="print the effective rule table and every problem",
                           description="Exit 0 when every file loads, 1 when any is rejected.")
    check.add_argument("dir", nargs="?", type=Path, metavar="DIR",
                       help="mapping directory (default: mapping.dir of the configuration)")
    check.add_argument("--config", type=Path, metavar="FILE")
    check.set_defaults(handler=lambda a: _check(_directory(a, default_config)))
    explain = sub.add_parser("explain", help="which rule applies to an address, and the result")
    explain.add_argument("url", metavar="URL")
    explain.add_argument("--dir", type=Path, metavar="DIR")
    explain.add_argument("--config", type=Path, metavar="FILE")
    explain.set_defaults(handler=lambda a: _explain(_directory(a, default_config), a.url))


def _directory(args: argparse.Namespace, default_config: Path) -> Path:
    given = getattr(args, "dir", None)
    if given is not None:
        return Path(given)
    return Path(load_settings(config_path(args.config, default_config)).mapping.dir)


def _load(directory: Path) -> tuple[MappingLoader, LoadReport]:
    if not directory.is_dir():
        raise StartupError(f"{directory}: no such mapping directory")
    loader = MappingLoader(directory)
    return loader, loader.load()


def _pattern(pattern: Pattern) -> str:
    return pattern.text + ("*" if pattern.prefix else "")


def _check(directory: Path) -> int:
    loader, report = _load(directory)
    rules = loader.rules
    print(f"mapping directory {directory}: {len(report.loaded)} file(s) loaded, "
          f"{len(report.rejected)} rejected")
    rows = [("inbound", _pattern(r.source), r.target, r.origin) for r in rules.redirections]
    rows += [("outbound", _pattern(r.destination), f"through {r.through}", r.origin)
             for r in rules.outbound]
    rows += [("outbound-exception", _pattern(p), "-", "-") for p in rules.outbound_exceptions]
    if rules.outbound_local_names:
        rows.append(("outbound-exception", "local_names", "-", "-"))
    rows += [("stream-receipt", _pattern(r.logical), r.receipt_url, r.origin)
             for r in rules.stream_receipts]
    if rules.default_receipt_url:
        rows.append(("stream-receipt", "(default)", rules.default_receipt_url, "-"))
    widths = [max([len(h)] + [len(row[i]) for row in rows])
              for i, h in enumerate(("KIND", "PATTERN", "RESULT", "FROM"))]
    for row in [("KIND", "PATTERN", "RESULT", "FROM"), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    for error in report.rejected:
        print(f"PROBLEM {error.source}: line {error.line}: {error.reason}")
    return 1 if report.rejected else 0


def _explain(directory: Path, url: str) -> int:
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise StartupError(f"{url!r}: expected an http(s) queue URL, as an SRMP <to> or a "
                           "DIRECT=HTTP(S):// format name names one (http://host/msmq/q)")
    rules = _load(directory)[0].rules
    inbound = route_inbound(rules, url)
    print(f"address  {url}")
    print("inbound  " + (f"{inbound.target}  (rule {inbound.origin}: "
                         f"{_pattern(inbound.source)})" if inbound else "no redirection"))
    outbound = route_outbound(rules, url)
    print("outbound " + (f"connect through {outbound.through}  (rule {outbound.origin})"
                         if outbound else "direct"))
    receipt = receipt_url_for(rules, url)
    print("receipts " + (receipt or "default order queue URL"))
    return 0
