"""``entrepot certs create`` and ``entrepot auth hash-key``: the security chores of setting a
gateway up (a development TLS pair; the SHA-256 that the config stores instead of a key)."""

from __future__ import annotations

import argparse
import hashlib
import secrets
import sys
from pathlib import Path

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    certs = commands.add_parser("certs", help="TLS certificates",
                                description="TLS certificates for the gateway.")
    certs_sub = certs.add_subparsers(dest="certs_command", metavar="ACTION", required=True)
    create = certs_sub.add_parser(
        "create", help="make a self-signed development certificate and key",
        description="Write cert.pem and key.pem (ECDSA P-256, mode 0600 for the key) into "
        "--out; use them as server.tls_cert and server.tls_key. For development and tests: "
        "production gateways use certificates from a real CA.")
    create.add_argument("--out", type=Path, default=Path("var/tls"), metavar="DIR",
                        help="directory to write into (default: var/tls)")
    create.add_argument("--cn", default="localhost", metavar="NAME",
                        help="subject common name (default: localhost)")
    create.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="more DNS names or IP addresses (repeatable); localhost, "
                        "127.0.0.1 and ::1 are always included")
    create.add_argument("--days", type=_days, default=365, metavar="N",
                        help="validity in days (default: 365)")
    create.add_argument("--force", action="store_true",
                        help="replace a cert.pem or key.pem already in --out")
    create.set_defaults(handler=_cmd_certs_create)

    auth = commands.add_parser("auth", help="credentials",
                               description="Credentials for partners and the admin.")
    auth_sub = auth.add_subparsers(dest="auth_command", metavar="ACTION", required=True)
    hash_key = auth_sub.add_parser(
        "hash-key", help="print the SHA-256 of an API key for the config",
        description="Print the SHA-256 (hex) of KEY, for auth.admin_key_sha256 or a partner's "
        "api_key_sha256. Without KEY it is read from standard input when that is not a "
        "terminal (the key stays out of the shell's history; a final newline is not part of "
        "it), else a new random key is made and printed first. An empty key is refused: "
        "anyone can present one.")
    hash_key.add_argument("key", nargs="?", metavar="KEY")
    hash_key.set_defaults(handler=_cmd_hash_key)


def _days(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 3650:
        raise argparse.ArgumentTypeError(f"days must be 1..3650, not {text!r}")
    return int(text)


def _cmd_certs_create(args: argparse.Namespace) -> int:
    from gateway.auth.tls import create_self_signed

    present = [p for p in (args.out / "cert.pem", args.out / "key.pem") if p.exists()]
    if present and not args.force:
        print(f"entrepot: {present[0]} exists: a key in use is not replaced without --force",
              file=sys.stderr)
        return 2
    try:
        cert, key = create_self_signed(args.out, common_name=args.cn,
                                       names=["localhost", "127.0.0.1", "::1", *args.name],
                                       days=args.days)
    except OSError as exc:
        print(f"entrepot: cannot write into {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"certificate {cert}\nprivate key {key}")
    return 0


def _cmd_hash_key(args: argparse.Namespace) -> int:
    key = args.key
    made = key is None and (sys.stdin is None or sys.stdin.isatty())  # None: fd 0 closed
    if made:
        key = secrets.token_urlsafe(32)
    elif key is None:
        key = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    if not key.strip():
        print("entrepot: the key is empty (or blank): anyone can present an empty key; give "
              "a long random one, or none to have one made", file=sys.stderr)
        return 2
    if key != key.strip():
        print("entrepot: the key has spaces at an end, which an Authorization header does "
              "not carry: give it without them", file=sys.stderr)
        return 2
    try:
        key.encode()
    except UnicodeEncodeError:
        print("entrepot: the key is not UTF-8 text", file=sys.stderr)
        return 2
    if made:
        print(f"key     {key}")
    print(f"sha256  {hashlib.sha256(key.encode()).hexdigest()}")
    return 0
