"""Run by Python at the start of every Python process Spark starts for an entrepot session:
this directory is on their path (``spark.executorEnv.PYTHONPATH``, gateway.spark.session).

Spark puts its home's ``python/lib/pyspark.zip`` (and py4j's zip) first on those processes'
path. With a pip-installed PySpark the zip is a copy of the installed package's sources, and
``zipimport`` compiles every module it loads at every start (it caches no bytecode), most
of such a process's start, where the installed package has its bytecode cached. A
streaming query from the ``entrepot`` source starts four such processes one after the other
before its first rows move (the source's creation, its offsets runner, the read planner,
the task workers' daemon). So the zips move to the end of the path, where they still serve
anything the installed packages lack, but only when they are the ones shipped inside the
installed pyspark package (the same sources): another Spark home keeps the path Spark set.

A ``sitecustomize`` further on the path, which this one hides, is run afterwards.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["prefer_installed_pyspark"]


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with the zips of the installed pyspark package's ``python/lib`` moved to its
    end; the same entries in the same order when pyspark is not installed outside a zip."""
    found = importlib.machinery.PathFinder.find_spec(
        "pyspark", [p for p in path if not p.endswith((".zip", ".jar"))])
    if found is None or not found.submodule_search_locations:
        return list(path)
    package = next(iter(found.submodule_search_locations))
    shipped = os.path.realpath(os.path.join(package, "python", "lib"))
    moved = [p for p in path if p.endswith(".zip")
             and os.path.dirname(os.path.realpath(p)) == shipped]
    return [p for p in path if p not in moved] + moved


def _run_the_hidden_one() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    _run_the_hidden_one()
