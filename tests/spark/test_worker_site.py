"""The Python processes Spark starts for an entrepot session import pyspark from its installed
package, not from the ``pyspark.zip`` Spark puts first on their path (compiled at every start),
and only when that zip is the installed package's own copy."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pyspark

from gateway.spark.session import WORKER_SITE

_INSTALLED = Path(pyspark.__file__).resolve().parent
_SHIPPED = sorted(str(p) for p in (_INSTALLED / "python" / "lib").glob("*.zip"))


def _python(path: list[str], code: str, tmp: Path) -> str:
    """``code``'s output in a fresh interpreter whose PYTHONPATH is ``path``, as a worker's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(path)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, text=True,
                          capture_output=True, check=True, timeout=60)
    return done.stdout.strip()


def test_a_worker_path_imports_the_installed_pyspark(tmp_path: Path) -> None:
    assert any(p.endswith("pyspark.zip") for p in _SHIPPED)
    where = _python([*_SHIPPED, str(WORKER_SITE)],
                    "import pyspark, py4j; print(pyspark.__file__, py4j.__file__)", tmp_path)
    assert ".zip" not in where
    assert where.split()[0] == pyspark.__file__


def test_another_spark_homes_zip_keeps_its_place(tmp_path: Path) -> None:
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("pyspark/__init__.py", "WHERE = 'other spark home'\n")
    where = _python([str(other), str(WORKER_SITE)], "import pyspark; print(pyspark.WHERE)",
                    tmp_path)
    assert where == "other spark home"


def test_a_sitecustomize_further_on_the_path_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    ran = _python([*_SHIPPED, str(WORKER_SITE), str(theirs)],
                  "import builtins, pyspark; print(getattr(builtins, 'THEIRS', 'missing'))",
                  tmp_path)
    assert ran == "ran"


def test_the_sessions_python_workers_use_the_installed_pyspark(spark: Any) -> None:
    seen = (spark.sparkContext.parallelize([0], 1)
            .map(lambda _: __import__("pyspark").__file__).collect())
    assert seen == [pyspark.__file__]


def test_loading_the_source_imports_no_pyarrow(tmp_path: Path) -> None:
    # What the driver's planning processes do with the pickled source before any row.
    loaded = _python([str(Path(__file__).resolve().parents[2])],
                     "import sys, gateway.spark.source; print(sorted({'pyarrow', 'numpy'} "
                     "& set(sys.modules)))", tmp_path)
    assert loaded == "[]"


def test_the_python_processes_the_jvm_starts_itself_get_the_worker_site(spark: Any) -> None:
    """The lookup of Python data sources runs with the JVM's own environment, not
    ``spark.executorEnv``: the session started its JVM with WORKER_SITE first on the
    ``PYTHONPATH``, and left the driver's own environment as it was."""
    jvm_path = spark.sparkContext._jvm.java.lang.System.getenv("PYTHONPATH") or ""
    assert jvm_path.split(os.pathsep)[0] == str(WORKER_SITE)
    assert str(WORKER_SITE) not in os.environ.get("PYTHONPATH", "")
