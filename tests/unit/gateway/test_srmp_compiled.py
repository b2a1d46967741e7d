"""The SRMP parsing modules compiled by mypyc (setup.py) against their own Python source.

mypyc checks the declared types at run time, where Python does not: a wrong annotation would
turn a request Python parses, or refuses with an SrmpError (400), into a TypeError (500). Both
builds parse the spec's vectors and thousands of mutations of them here; they must give the
same message (compared field by field, as text) or the same error with the same reason.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.srmp import codec, parsed
from tests.helpers import REPO_ROOT
from tests.srmp_vectors import derived, mutate, split_request, wire



def _compiled_paths() -> list[str]:
    """setup.py's MYPYC_MODULES, read from its text (importing it would run setup())."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MYPYC_MODULES":
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no MYPYC_MODULES")


_NAMES = tuple(path.removesuffix(".py").replace("/", ".") for path in _compiled_paths())
_MODULES = tuple(name.rsplit(".", 1)[1] for name in _NAMES)
assert all(name.startswith("gateway.srmp.") for name in _NAMES)  # the finder below assumes it
_MULTIPART = 'multipart/related; boundary="MSMQ - SOAP boundary, 26500"'


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the six modules as their .py files (past the compiled .so next to them)."""

    def find_spec(self, name: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if name not in _NAMES:
            return None
        source = REPO_ROOT / (name.replace(".", "/") + ".py")
        return importlib.util.spec_from_file_location(name, source)


@pytest.fixture(scope="module")
def interpreted() -> Iterator[dict[str, ModuleType]]:
    """The six modules run by the interpreter from their source, importing one another (the
    compiled ones stay in sys.modules for every other test)."""
    compiled = {name: sys.modules.pop(name) for name in _NAMES if name in sys.modules}
    finder = _SourceFirst()
    sys.meta_path.insert(0, finder)
    try:
        modules = {m: importlib.import_module(f"gateway.srmp.{m}") for m in _MODULES}
    finally:
        sys.meta_path.remove(finder)
        for name in _NAMES:
            sys.modules.pop(name, None)
        sys.modules.update(compiled)
    assert all(m.__file__ and m.__file__.endswith(".py") for m in modules.values())
    yield modules


def test_the_parsing_modules_are_compiled() -> None:
    """CI builds them from the project's files (setup.py); a build without a C compiler or
    with ENTREPOT_NO_MYPYC runs the same source, slower, and fails here."""
    for name in _NAMES:
        module = importlib.import_module(name)
        assert module.__file__ is not None and not module.__file__.endswith(".py"), (
            f"{name} is not compiled: pip install -e . needs a C compiler and mypy")
        source = REPO_ROOT / (name.replace(".", "/") + ".py")
        built = next(source.parent.glob(source.stem + ".*.so"))
        # An edited module whose build is older would run as it was built (make rebuilds it).
        assert built.stat().st_mtime >= source.stat().st_mtime, (
            f"{built.name} is older than {source.name}: rebuild (make test, or pip install -e .)")


def _outcome(codec_module: ModuleType, parsed_module: ModuleType, content_type: str,
             raw: bytes) -> tuple[str, ...]:
    """What a parse gives, as text: the error's class and reason, or the message with the
    properties made of it."""
    try:
        message = codec_module.parse_request(content_type, raw)
    except Exception as exc:  # noqa: BLE001 - which exception is what is compared
        return type(exc).__name__, str(getattr(exc, "reason", exc))
    props, error = parsed_module.ParsedRequest.properties_of(message, raw, now_ms=1_000)
    return "message", repr(message), repr(props), repr(error)


def _alike(interpreted: dict[str, ModuleType], content_type: str, raw: bytes) -> None:
    compiled = _outcome(codec, parsed, content_type, raw)
    assert compiled[0] not in ("TypeError", "AttributeError"), compiled
    assert compiled == _outcome(interpreted["codec"], interpreted["parsed"], content_type, raw)


@pytest.mark.parametrize("name", ["V01", "V02", "V03", "V05", "V07"])
def test_spec_vectors_parse_alike(interpreted: dict[str, ModuleType], name: str) -> None:
    request = wire(name)
    _alike(interpreted, request.headers["Content-Type"], request.body)


@pytest.mark.parametrize("name", ["D1", "D2", "D3"])
def test_derived_vectors_parse_alike(interpreted: dict[str, ModuleType], name: str) -> None:
    request = split_request(derived(name))
    _alike(interpreted, request.headers["Content-Type"], request.body)


_SEED = split_request(derived("D3")).body


@settings(max_examples=500, deadline=None)
@given(st.integers(0, len(_SEED) - 1), st.binary(min_size=1, max_size=8),
       st.sampled_from(["replace", "insert", "delete"]))
def test_mutations_parse_alike(interpreted: dict[str, ModuleType], at: int, data: bytes,
                               how: str) -> None:
    raw = mutate(_SEED, at, data, how)
    _alike(interpreted, _MULTIPART, raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=1024), st.sampled_from([_MULTIPART, "text/xml"]))
def test_any_bytes_parse_alike(interpreted: dict[str, ModuleType], raw: bytes,
                               content_type: str) -> None:
    _alike(interpreted, content_type, raw)
