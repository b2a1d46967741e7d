"""Admin commands against a running gateway: ``queue``, ``message``, ``dlq``, ``link``, ``tx``.

``--url`` (default ``$ENTREPOT_URL``, else the config's ``server.listen``), ``--token`` (default
``$ENTREPOT_TOKEN``; or ``--token-file``), ``--json`` for scripts. Exit codes: 0 done, 1 the
gateway refused (its reason on stderr), 2 bad usage, 3 the gateway cannot be reached, 4 not
found.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from gateway.cli.admin_client import AdminClient, AdminError
from gateway.cli.config import config_path
from gateway.cli.output import Progress, print_json, print_table
from mapping.names import DEADLETTER, DEADXACT, QueueNameError, parse_queue_path

__all__ = ["add_commands"]

DEAD_LETTER = "system$;deadletter"
# Where dlq looks without --queue: both dead-letter queues (transactional messages die in the
# second).
DEAD_LETTERS = (DEAD_LETTER, "system$;deadxact")
_BOTH = f"default: both dead-letter queues ({', '.join(DEAD_LETTERS)})"
_QUEUE_COLUMNS = [("path", "QUEUE"), ("messages", "MESSAGES"), ("bytes", "BYTES"),
                  ("transactional", "TX"), ("quota", "QUOTA")]
_MESSAGE_COLUMNS = [("seq", "SEQ"), ("id", "ID"), ("label", "LABEL"), ("class", "CLASS"),
                    ("arrived_at", "ARRIVED"), ("size", "BYTES")]


def add_commands(commands: Any, default_config: Path) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="the gateway (default $ENTREPOT_URL, else server.listen "
                        "of the config)")
    common.add_argument("--token", help="API key (default $ENTREPOT_TOKEN)")
    common.add_argument("--token-file", type=Path, help="file holding the API key")
    common.add_argument("--config", type=Path, help=f"config for the defaults "
                        f"(default $ENTREPOT_CONFIG, then {default_config})")
    common.add_argument("--cafile", default="", help="CA bundle for an https gateway")
    common.add_argument("--json", action="store_true", help="JSON output for scripts")
    common.set_defaults(default_config=default_config)

    queue = _group(commands, "queue", "list, create, show, purge and delete queues")
    _cmd(queue, "list", common, _queue_list, "every queue with its depth")
    create = _cmd(queue, "create", common, _queue_create,
                  "create a queue, or change the settings given of an existing one")
    create.add_argument("path")
    create.add_argument("--transactional", action="store_true")
    create.add_argument("--quota", help="e.g. 1GiB (0: none)")
    create.add_argument("--journal", action="store_true")
    create.add_argument("--label")
    _cmd(queue, "show", common, _queue_show, "one queue").add_argument("path")
    for name, handler in (("purge", _queue_purge), ("delete", _queue_delete)):
        sub = _cmd(queue, name, common, handler, f"{name} a queue (asks for --yes)")
        sub.add_argument("path")
        sub.add_argument("--yes", action="store_true", help="really do it")

    message = _group(commands, "message", "send, peek at and receive messages")
    send = _cmd(message, "send", common, _message_send, "send one message")
    send.add_argument("path")
    what = send.add_mutually_exclusive_group()
    what.add_argument("--body", help="the body as text (default: read stdin)")
    what.add_argument("--file", type=Path, help="the body from a file")
    send.add_argument("--label")
    send.add_argument("--priority", type=int, choices=range(8), metavar="0-7")
    send.add_argument("--express", action="store_true")
    send.add_argument("--correlation-id")
    send.add_argument("--transaction", help="an open transaction's id")
    peek = _cmd(message, "peek", common, _message_peek, "look without taking")
    peek.add_argument("path")
    peek.add_argument("--limit", type=int, default=20)
    receive = _cmd(message, "receive", common, _message_receive, "take messages")
    receive.add_argument("path")
    receive.add_argument("--max", type=int, default=1)
    receive.add_argument("--wait", type=float, default=0.0, help="seconds to wait")

    dlq = _group(commands, "dlq", "dead-letter queues: list, show, requeue, delete")
    listing = _cmd(dlq, "list", common, _dlq_list, "dead letters with their class")
    listing.add_argument("--queue", help=_BOTH)
    listing.add_argument("--limit", type=int, default=100, help="per queue")
    for name, handler in (("show", _dlq_show), ("delete", _dlq_delete)):
        sub = _cmd(dlq, name, common, handler, f"{name} one dead letter by id")
        sub.add_argument("id")
        sub.add_argument("--queue", help=_BOTH)
    requeue = _cmd(dlq, "requeue", common, _dlq_requeue,
                   "send dead letters back (one by id, or --all matching the filters)")
    requeue.add_argument("id", nargs="?")
    requeue.add_argument("--all", action="store_true")
    requeue.add_argument("--queue", help=_BOTH)
    requeue.add_argument("--to", help="target queue (default: where each came from)")
    requeue.add_argument("--class", dest="message_class", help="only this MQMSG_CLASS_*")
    requeue.add_argument("--source-queue", help="only those that died in this queue")

    link = _group(commands, "link", "outgoing links: list, pause, resume")
    _cmd(link, "list", common, _link_list, "links with state and backlog")
    for name in ("pause", "resume"):
        _cmd(link, name, common, _link_action, f"{name} a link").add_argument("id")

    tx = _group(commands, "tx", "transactions: list, commit, abort (prepared ones too)")
    _cmd(tx, "list", common, _tx_list, "open and prepared transactions")
    for name in ("commit", "abort"):
        _cmd(tx, name, common, _tx_action, f"{name} a transaction").add_argument("id")


def _group(commands: Any, name: str, text: str) -> Any:
    parser = commands.add_parser(name, help=text, description=text)
    return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def _cmd(group: Any, name: str, common: argparse.ArgumentParser, handler: Any,
         text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(name, parents=[common], help=text,
                                                       description=text)
    parser.set_defaults(handler=lambda args: _run(handler, args))
    return parser


def _run(handler: Any, args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        code: int = handler(client, args)
        return code
    except AdminError as exc:
        print(f"entrepot: {exc}", file=sys.stderr)
        return exc.code


def _client(args: argparse.Namespace) -> AdminClient:
    token = args.token or os.environ.get("ENTREPOT_TOKEN", "")
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise AdminError(f"--token-file {args.token_file}: {exc.strerror}", 2) from None
    url = args.url or os.environ.get("ENTREPOT_URL", "") or _url_from_config(args)
    if not url.startswith(("http://", "https://")):
        raise AdminError(f"--url {url!r}: expected http(s)://host:port", 2)
    return AdminClient(url, token, args.cafile)


def _url_from_config(args: argparse.Namespace) -> str:
    from gateway.settings import load_settings

    settings = load_settings(config_path(args.config, args.default_config))
    server = settings.server
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if server.tls_cert else 'http'}://{host}:{server.port}"


def _q(path: str) -> str:
    return "/v1/queues/" + path


# ---- queue -----------------------------------------------------------------------------

def _queue_list(client: AdminClient, args: argparse.Namespace) -> int:
    queues = client.call("GET", "/v1/queues")["queues"]
    if args.json:
        print_json(queues)
    else:
        print_table(queues, _QUEUE_COLUMNS, empty="(no queues)")
    return 0


def _queue_create(client: AdminClient, args: argparse.Namespace) -> int:
    """A new queue with the options given; an existing one keeps every setting no option
    names (the API's PUT replaces the whole definition: the rest would go back to its
    default)."""
    try:
        current = client.call("GET", _q(args.path))
    except AdminError as exc:
        if exc.code != 4:
            raise
        current = {}
    doc: dict[str, Any] = {key: current[key] for key in _QUEUE_SETTINGS if key in current}
    if args.transactional or not current:
        doc["transactional"] = args.transactional
    if args.quota is not None:
        doc["quota"] = args.quota
    if args.journal:
        doc["journal"] = True
    if args.label is not None:
        doc["label"] = args.label
    return _show_queue(client.call("PUT", _q(args.path), doc=doc), args)


# What PUT /v1/queues/{path} takes (docs/rest-api.md).
_QUEUE_SETTINGS = ("transactional", "quota", "journal", "journal_quota", "label", "anonymous",
                   "authenticate")


def _queue_show(client: AdminClient, args: argparse.Namespace) -> int:
    return _show_queue(client.call("GET", _q(args.path)), args)


def _show_queue(queue: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        print_json(queue)
    else:
        width = max(len(k) for k in queue)
        for key, value in queue.items():
            print(f"{key.ljust(width)}  {value}")
    return 0


def _confirm(args: argparse.Namespace, what: str) -> None:
    if not args.yes:
        raise AdminError(f"{what}: add --yes to confirm", 2)


def _queue_purge(client: AdminClient, args: argparse.Namespace) -> int:
    _confirm(args, f"purge {args.path}")
    answer = client.call("POST", _q(args.path) + "/purge")
    print_json(answer) if args.json else print(f"purged {answer['purged']} messages")
    return 0


def _queue_delete(client: AdminClient, args: argparse.Namespace) -> int:
    _confirm(args, f"delete {args.path}")
    client.call("DELETE", _q(args.path))
    print_json({"deleted": args.path}) if args.json else print(f"deleted {args.path}")
    return 0


# ---- message ---------------------------------------------------------------------------

def _message_send(client: AdminClient, args: argparse.Namespace) -> int:
    if args.body is not None:
        body = args.body.encode()
    elif args.file is not None:
        try:
            body = args.file.read_bytes()
        except OSError as exc:
            raise AdminError(f"--file {args.file}: {exc.strerror}", 2) from None
    else:
        body = sys.stdin.buffer.read()
    headers = {}
    for flag, header in (("label", "Mq-Label"), ("priority", "Mq-Priority"),
                         ("correlation_id", "Mq-Correlation-Id"),
                         ("transaction", "Mq-Transaction")):
        if getattr(args, flag) is not None:
            headers[header] = str(getattr(args, flag))
    if args.express:
        headers["Mq-Delivery"] = "express"
    answer = client.call("POST", _q(args.path) + "/messages", body=body, headers=headers)
    if args.json:
        print_json(answer)
    elif "transaction" in answer:  # 202: held until the transaction commits
        print(f"held in transaction {answer['transaction']} (its send number "
              f"{answer['index']}): stored when it commits")
    else:
        print(f"sent {answer['id']} (seq {answer['seq']})")
    return 0


def _rows(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "size": len(base64.b64decode(m.get("body_base64", "")))} for m in messages]


def _message_peek(client: AdminClient, args: argparse.Namespace) -> int:
    answer = client.call("GET", _q(args.path) + "/messages", query={"limit": args.limit})
    if args.json:
        print_json(answer["messages"])
    else:
        print_table(_rows(answer["messages"]), _MESSAGE_COLUMNS, empty="(empty)")
    return 0


def _message_receive(client: AdminClient, args: argparse.Namespace) -> int:
    answer = client.call("POST", _q(args.path) + "/receive",
                         query={"max": args.max, "wait": args.wait})
    messages = answer["messages"]
    if args.json:
        print_json(messages)
        return 0
    for message in messages:
        body = base64.b64decode(message["body_base64"])
        print(f"# {message['id']} seq={message['seq']} label={message['label']!r} "
              f"{len(body)} bytes")
        sys.stdout.buffer.write(body + b"\n")
        sys.stdout.flush()
    if not messages:
        print("(no message)", file=sys.stderr)
    return 0


# ---- dlq -------------------------------------------------------------------------------

def _dead_rows(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "source": row.get("properties", {}).get("source_queue", "-")}
            for row in _rows(messages)]


def _dead_letter_queues(args: argparse.Namespace) -> tuple[str, ...]:
    """--queue, which must name a dead-letter queue (``dlq delete`` of an ordinary queue's
    message would delete it), else both."""
    if args.queue is None:
        return DEAD_LETTERS
    try:
        canonical = parse_queue_path(args.queue).canonical
    except QueueNameError:
        canonical = ""
    if canonical not in (DEADLETTER, DEADXACT):
        raise AdminError(f"--queue {args.queue!r}: not a dead-letter queue (use "
                         f"{' or '.join(DEAD_LETTERS)})", 2)
    return (args.queue,)


def _dlq_list(client: AdminClient, args: argparse.Namespace) -> int:
    messages = [m for queue in _dead_letter_queues(args) for m in client.call(
        "GET", _q(queue) + "/messages", query={"limit": args.limit})["messages"]]
    if args.json:
        print_json(messages)
    else:
        print_table(_dead_rows(messages),
                    [("id", "ID"), ("queue", "QUEUE"), ("class", "CLASS"), ("source", "FROM"),
                     ("label", "LABEL"), ("arrived_at", "DEAD SINCE"), ("size", "BYTES")],
                    empty="(no dead letters)")
    return 0


def _message_path(queue: str, message_id: str) -> str:
    return _q(queue) + "/messages/" + urllib.parse.quote(message_id, safe="")


def _on_dead_letter(client: AdminClient, args: argparse.Namespace, method: str,
                    suffix: str = "", doc: dict[str, Any] | None = None) -> Any:
    """``method`` on the dead letter ``args.id``, in --queue or else in whichever of the
    dead-letter queues holds it.

    Raises:
        AdminError: 4 when none holds it.
    """
    queues = _dead_letter_queues(args)
    for queue in queues:
        try:
            return client.call(method, _message_path(queue, str(args.id)) + suffix, doc=doc)
        except AdminError as exc:
            # Another 404 than the message's (a --to queue that does not exist) is said.
            if exc.code != 4 or not exc.problem_type.endswith("MQ_ERROR_MESSAGE_NOT_FOUND"):
                raise
    raise AdminError(f"no dead letter '{args.id}' in {' or '.join(queues)}", 4)


def _dlq_show(client: AdminClient, args: argparse.Namespace) -> int:
    message = _on_dead_letter(client, args, "GET")
    if args.json:
        print_json(message)
        return 0
    body = base64.b64decode(message.pop("body_base64", ""))
    properties = message.pop("properties", {})
    width = max(len(k) for k in [*message, *properties])
    for key, value in [*message.items(), *properties.items()]:
        print(f"{key.ljust(width)}  {value}")
    print(f"{'body'.ljust(width)}  {len(body)} bytes")
    return 0


def _dlq_delete(client: AdminClient, args: argparse.Namespace) -> int:
    _on_dead_letter(client, args, "DELETE")
    print_json({"deleted": args.id}) if args.json else print(f"deleted {args.id}")
    return 0


def _dlq_requeue(client: AdminClient, args: argparse.Namespace) -> int:
    if bool(args.id) == bool(args.all):
        raise AdminError("dlq requeue: give a message id or --all (with filters)", 2)
    if args.id:
        doc = {"queue": args.to} if args.to else {}
        moved = _on_dead_letter(client, args, "POST", "/requeue", doc)
        print_json(moved) if args.json else print(f"requeued {args.id} to {moved['queue']}")
        return 0
    queues = _dead_letter_queues(args)
    progress = Progress(sum(client.call("GET", _q(q))["messages"] for q in queues), "requeued")
    flt: dict[str, Any] = {"limit": 1000}
    for key, value in (("queue", args.to), ("class", args.message_class),
                       ("source_queue", args.source_queue)):
        if value is not None:  # "" too: the gateway refuses it, rather than no filter
            flt[key] = value
    for queue in queues:
        while True:  # bounded batches, so one command can move a large queue with progress
            moved = int(client.call("POST", _q(queue) + "/requeue", doc=flt)["requeued"])
            progress.advance(moved)
            if moved < flt["limit"]:
                break
    progress.finish()
    print_json({"requeued": progress.done}) if args.json else print(
        f"requeued {progress.done} messages")
    return 0


# ---- link, tx --------------------------------------------------------------------------

def _link_list(client: AdminClient, args: argparse.Namespace) -> int:
    links = client.call("GET", "/v1/links")["links"]
    if args.json:
        print_json(links)
    else:
        print_table(links, [("id", "ID"), ("kind", "KIND"), ("destination", "DESTINATION"),
                            ("state", "STATE"), ("backlog", "BACKLOG"), ("unacked", "UNACKED"),
                            ("retries", "RETRIES"), ("last_error", "LAST ERROR")],
                    empty="(no links)")
    return 0


def _link_action(client: AdminClient, args: argparse.Namespace) -> int:
    action = args.link_command
    summary = client.call("POST", f"/v1/links/{args.id}/{action}")
    print_json(summary) if args.json else print(f"{summary['destination']}: {summary['state']}")
    return 0


def _tx_list(client: AdminClient, args: argparse.Namespace) -> int:
    transactions = client.call("GET", "/v1/transactions")["transactions"]
    if args.json:
        print_json(transactions)
    else:
        print_table(transactions, [("id", "ID"), ("owner", "OWNER"), ("state", "STATE"),
                                   ("sends", "SENDS"), ("receives", "RECEIVES"),
                                   ("expires_at", "EXPIRES"), ("prepared_at", "PREPARED")],
                    empty="(no transactions)")
    return 0


def _tx_action(client: AdminClient, args: argparse.Namespace) -> int:
    answer = client.call("POST", f"/v1/transactions/{args.id}/{args.tx_command}")
    print_json(answer) if args.json else print(f"{args.id}: {answer['state']}")
    return 0
