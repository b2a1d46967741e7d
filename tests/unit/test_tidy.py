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


# The layers of gateway/, from the top: a package may import those below it, never above.
# fronts (the processes around the store owner) sits on the web layer it runs in each front.
# inbound may use outbound (stream receipts leave by the receipt sender); not the reverse.
_LAYERS = {"cli": 5, "fronts": 4, "web": 3, "inbound": 2, "outbound": 2, "queues": 1}
_SIDEWAYS = {("inbound", "outbound")}
# The protocol and the leaves under every layer: they import no layer.
_GROUND = {"srmp", "msmq", "auth", "spark"}


def _gateway_imports(path: Path) -> list[tuple[str, int]]:
    """The gateway modules ``path`` imports (dotted), with the line of each import."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names
                         if a.name.startswith("gateway."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gateway":
                found.extend((f"gateway.{a.name}", node.lineno) for a in node.names)
            elif node.module.startswith("gateway."):
                found.append((node.module, node.lineno))
    return found


def _package_of(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT / "gateway").parts
    return parts[0] if len(parts) > 1 else ""


def test_gateway_keeps_few_modules_at_its_top() -> None:
    top = sorted(p.name for p in (REPO_ROOT / "gateway").glob("*.py"))
    assert len(top) <= 15, f"{len(top)} modules directly under gateway/: {top}"


def test_layers_import_only_downwards() -> None:
    wrong = []
    for path in _package_files("gateway"):
        package = _package_of(path)
        for module, line in _gateway_imports(path):
            target = module.split(".")[1]
            if target not in _LAYERS or target == package:
                continue
            upward = (package in _LAYERS and _LAYERS[target] >= _LAYERS[package]
                      and (package, target) not in _SIDEWAYS)
            if upward or package in _GROUND or (package == "" and path.name != "__main__.py"):
                wrong.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", ["queues", "inbound"])
def test_the_domain_and_the_inbound_pipeline_know_no_http_server(package: str) -> None:
    for path in _package_files(f"gateway/{package}"):
        assert "aiohttp" not in _imports(path), path


def test_store_records_are_composed_only_by_sending() -> None:
    composing = []
    for path in _package_files("gateway"):
        if path == REPO_ROOT / "gateway/queues/sending.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "SendSpec"):
                composing.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not composing, "SendSpec built outside gateway/queues/sending.py: " + \
        ", ".join(composing)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(
        ".__init__")


def test_no_import_circles() -> None:
    modules = {_module_name(p): p for package in ("gateway", "store", "mapping")
               for p in _package_files(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                edges.update(f"{node.module}.{a.name}" for a in node.names
                             if f"{node.module}.{a.name}" in modules)
                if node.module in modules and not node.module.endswith(tuple(
                        f".{a.name}" for a in node.names)):
                    edges.add(node.module)
        graph[name] = edges - {name} - {n for n in edges if modules[n].name == "__init__.py"}
    circles = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, "\n".join(circles)


def test_imports_keep_one_order() -> None:
    """Standard library, third party, first party, each sorted (ruff's isort rule, configured
    in pyproject.toml): moving modules between packages must not leave them scrambled."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I",
                           "gateway", "store", "mapping", "bench"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
