"""Typed application keys: the only way state is stored on the aiohttp application."""

from __future__ import annotations

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import dsa

from gateway.auth.authenticator import Authenticator
from gateway.inbound.parse_pool import ParsePool
from gateway.metrics import Metrics
from gateway.settings import Settings
from gateway.web.state import GatewayState
from store.fileops import FileOps

__all__ = ["SETTINGS_KEY", "METRICS_KEY", "STATE_KEY", "FILE_OPS_KEY", "SIGNERS_KEY",
           "PARSE_POOL_KEY", "AUTHENTICATOR_KEY"]

SETTINGS_KEY = web.AppKey("settings", Settings)
METRICS_KEY = web.AppKey("metrics", Metrics)
STATE_KEY = web.AppKey("state", GatewayState)
FILE_OPS_KEY = web.AppKey("file_ops", FileOps)
# Sender certificates' public keys for signed SRMP messages, by source QM GUID.
SIGNERS_KEY = web.AppKey("signers", dict[str, dsa.DSAPublicKey])
# Worker processes parsing SRMP requests (None: parsed on the loop; srmp.parse_workers = 0).
PARSE_POOL_KEY: web.AppKey[ParsePool | None] = web.AppKey("parse_pool")
# The credentials, nonces and rate limits of every request (the store owner's are those of
# every front too: gateway.fronts).
AUTHENTICATOR_KEY = web.AppKey("authenticator", Authenticator)
