"""The reference pages keep up with the code they describe: docs/configuration.md documents
every configuration key in its own section, and nothing else."""

from __future__ import annotations

import dataclasses
import re
import typing

from gateway.settings import Settings
from tests.helpers import REPO_ROOT


def _keys_in_code() -> dict[str, set[str]]:
    """``{"server": {"listen", ...}, "[peers]": {"url", ...}}`` from the settings classes."""
    hints = typing.get_type_hints(Settings)
    sections: dict[str, set[str]] = {}
    for section in dataclasses.fields(Settings):
        kind = hints[section.name]
        if typing.get_origin(kind) is tuple:  # [[name]]: a tuple of declarations
            sections[f"[{section.name}]"] = {f.name for f in
                                             dataclasses.fields(typing.get_args(kind)[0])}
        else:
            sections[section.name] = {f.name for f in dataclasses.fields(kind)}
    return sections


def _rows_in_docs() -> dict[str, list[str]]:
    """The first column's backticked names of the table under each ``## [section]``, in
    order, a name as often as it is listed."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (REPO_ROOT / "docs" / "configuration.md").read_text().splitlines():
        heading = re.fullmatch(r"## \[(\[?[a-z_]+\]?)\]", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
        elif line.startswith("## "):
            current = None
        elif current is not None and line.startswith("| `"):
            current.extend(re.findall(r"`([a-z_0-9]+)`", line.split("|")[1]))
    return sections


def _keys_in_docs() -> dict[str, set[str]]:
    return {section: set(keys) for section, keys in _rows_in_docs().items()}


def test_configuration_page_lists_every_key_in_its_section() -> None:
    code, docs = _keys_in_code(), _keys_in_docs()
    assert set(docs) == set(code), "sections"
    for section, keys in code.items():
        assert docs[section] == keys, (f"[{section}] missing: {sorted(keys - docs[section])}, "
                                       f"unknown: {sorted(docs[section] - keys)}")


def test_configuration_page_lists_each_key_once() -> None:
    for section, keys in _rows_in_docs().items():
        twice = sorted({key for key in keys if keys.count(key) > 1})
        assert not twice, f"[{section}] lists {twice} more than once"
