"""Style rules that are checked, not hoped for (TigerBeetle's tidy.zig in spirit)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

# Modules that do no I/O: bytes in, values out, time passed as an argument.
PURE_MODULES = [
    "gateway/units.py",
    "gateway/settings.py",
    "mapping/names.py",
    "mapping/formatnames.py",
    "mapping/rules.py",
    "mapping/parse.py",
    "mapping/engine.py",
    "mapping/errors.py",
    "gateway/msmq/classes.py",
    "gateway/msmq/message.py",
    "gateway/web/rest_codec.py",
    "gateway/range_wire.py",
    "store/inflight.py",
    "gateway/srmp/errors.py",
    "gateway/srmp/mime.py",
    "gateway/srmp/model.py",
    "gateway/srmp/envelope.py",
    "gateway/srmp/build.py",
    "gateway/srmp/codec.py",
    "gateway/srmp/eod.py",
    "gateway/srmp/properties.py",
    "gateway/srmp/receipts.py",
    "gateway/srmp/signature.py",
    "gateway/auth/principal.py",
    "gateway/auth/ratelimit.py",
    "gateway/auth/hmac_sig.py",
    "store/framing.py",
    "store/bitmap.py",
    "store/recovery.py",
    "store/grouped.py",
    "store/logcodec.py",
    "store/allocator.py",
    "store/quota.py",
]
FORBIDDEN_IN_PURE = {"asyncio", "aiohttp", "os", "mmap", "socket", "time", "random", "logging",
                     "subprocess", "threading", "shutil"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _package_files(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


def test_assertions_are_enabled() -> None:
    with pytest.raises(AssertionError):
        assert False  # noqa: B011 - the point of the test


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_do_no_io(module: str) -> None:
    path = REPO_ROOT / module
    if not path.exists():
        pytest.fail(f"{module} is listed as pure but does not exist; update PURE_MODULES")
    assert not (_imports(path) & FORBIDDEN_IN_PURE), module


@pytest.mark.parametrize(("package", "forbidden"),
                         [("store", {"gateway", "mapping"}), ("mapping", {"gateway", "store"})])
def test_dependencies_point_one_way(package: str, forbidden: set[str]) -> None:
    for path in _package_files(package):
        assert not (_imports(path) & forbidden), path


@pytest.mark.parametrize("package", ["gateway", "store", "mapping"])
def test_modules_stay_small(package: str) -> None:
    for path in _package_files(package):
        lines = path.read_text().count("\n")
        assert lines <= 600, f"{path} has {lines} lines; split it"


@pytest.mark.parametrize("package", ["gateway", "store", "mapping"])
def test_lines_fit_in_100_columns(package: str) -> None:
    for path in _package_files(package):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert len(line) <= 100, f"{path}:{number} is {len(line)} columns"
