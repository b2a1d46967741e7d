"""The compiled parts of entrepot; everything else is in pyproject.toml.

Both are optional: without a C compiler (or without mypyc) the same modules run as Python.
- ``store._placing``: the writer's placing loop in C (store/_placing.c, several times faster
  than its Python twin, which stays and is used when the extension is missing).
- The SRMP parsing modules compiled by mypyc from their own typed source: the envelope walk,
  MIME split and message model run faster, which lowers the parse worker's CPU a message
  (docs/performance.md §Where the time goes). Set ``ENTREPOT_NO_MYPYC=1`` to build without
  them.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup

# Pure modules (bytes in, values out), typed for mypy --strict, imported by the SRMP parse
# worker and the loop; nothing monkeypatches them.
MYPYC_MODULES = [
    "gateway/srmp/model.py",
    "gateway/srmp/mime.py",
    "gateway/srmp/envelope.py",
    "gateway/srmp/codec.py",
    "gateway/srmp/properties.py",
    "gateway/srmp/parsed.py",
]


def _can_compile() -> bool:
    """A C compiler and the Python headers: mypyc's modules are all or nothing (a module
    built without its shared part would not import), so they are not tried without them."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(compiler.split()[0]) is not None and headers.is_file()


def _mypyc_extensions() -> list[Extension]:
    if os.environ.get("ENTREPOT_NO_MYPYC") or not _can_compile():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    try:
        return list(mypycify(MYPYC_MODULES, opt_level="3", group_name="gateway.srmp._compiled"))
    except SystemExit:  # mypy found errors (printed above): build the interpreted modules
        print("entrepot: mypyc did not compile the SRMP parsing modules; they run as Python",
              file=sys.stderr)
        return []


setup(ext_modules=[
    Extension("store._placing", sources=["store/_placing.c"], optional=True),
    *_mypyc_extensions(),
])
