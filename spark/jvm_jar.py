"""The kanal-spark jar: `kanal-log` and `kanal-metadata` as JVM DataSource V2 tables (spark/jvm/*.java),
built here with javac.

PySpark's Python data source API turns every Arrow batch into rows and has no column pruning, which capped
`kanal-log` below twice a plain Python loop (docs/benchmarks.md, Spark sources). The jar's tables prune
columns and hand Spark the Arrow vectors; the rows still come from the Python readers, in worker
processes (jvm_worker.py). `kanal_session` puts the jar on the session's classpath and registers the
Python sources under those names only where no jar can be had (and as `<name>-python` always: the JVM
table reaches kanal-metadata's stream through that name).

The jar is built from the Java sources shipped in this package, against the installed pyspark's jars, on
first use (javac takes a few seconds; `bash deploy/bootstrap.sh` builds it ahead) and kept under a name
that changes with the sources, the schema and the pyspark version, so a stale jar is never used. It goes
next to the sources when that directory is writable, else to ~/.cache/kanal. Without javac (a JRE only)
or a pyspark whose API the sources do not compile against, there is no jar, and the formats are the Python
sources: the same rows, slower.

    python -m kanal.spark.jvm_jar        # build (if needed) and print the jar's path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kanal.spark.columns import LOG_TABLE, METADATA_TABLE

SOURCES_DIR = Path(__file__).parent / "jvm"
# What Spark's ServiceLoader reads to map format("kanal-log") to the class.
REGISTER_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
# Each format the jar serves, its provider class and its full schema (written as "<format>.ddl").
PROVIDERS = {"kanal-log": ("kanal.spark.jvm.LogSource", LOG_TABLE),
             "kanal-metadata": ("kanal.spark.jvm.MetadataSource", METADATA_TABLE)}
PROVIDER_CLASS = PROVIDERS["kanal-log"][0]


def _pyspark_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _digest() -> str:
    import pyspark

    h = hashlib.sha256()
    for source in sorted(SOURCES_DIR.glob("*.java")):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    for name, (provider, table) in sorted(PROVIDERS.items()):
        h.update(f"{name}\0{provider}\0{table.ddl()}\0".encode())
    h.update(pyspark.__version__.encode())
    return h.hexdigest()[:16]


def _places() -> list[Path]:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kanal"
    return [SOURCES_DIR / "build", cache]


def jar_path(build: bool = True) -> Path | None:
    """The jar for these sources and this pyspark; built when missing and `build` (None without javac;
    a failed build raises RuntimeError with javac's output)."""
    name = f"kanal-spark-{_digest()}.jar"
    for place in _places():
        if (place / name).is_file():
            return place / name
    javac = _javac()
    if not build or javac is None:
        return None
    for place in _places():
        try:
            place.mkdir(parents=True, exist_ok=True)
            if os.access(place, os.W_OK):
                return _build(javac, place / name)
        except OSError:
            continue
    return None


def _build(javac: str, jar: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="kanal-spark-jar-", dir=jar.parent) as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        done = subprocess.run(
            [javac, "-nowarn", "--release", "17", "-encoding", "UTF-8", "-d", str(classes),
             "-cp", str(_pyspark_dir() / "jars" / "*"), *map(str, sorted(SOURCES_DIR.glob("*.java")))],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac could not build the kanal-spark jar:\n{done.stderr.strip()}")
        staged = Path(tmp) / jar.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            z.writestr(REGISTER_SERVICE, "".join(f"{provider}\n" for provider, _ in PROVIDERS.values()))
            for name, (_, table) in PROVIDERS.items():
                z.writestr(f"{name}.ddl", table.ddl() + "\n")
            for path in sorted(classes.rglob("*.class")):
                z.write(path, path.relative_to(classes).as_posix())
        os.replace(staged, jar)  # atomic: a concurrent build or reader sees a whole jar or none
    for stale in jar.parent.glob("kanal-spark-*.jar"):
        if stale != jar:  # built from other sources or for another pyspark: never used again
            stale.unlink(missing_ok=True)
    return jar


def main() -> None:
    jar = jar_path()
    if jar is None:
        print("kanal: no javac (a JDK): kanal-log and kanal-metadata run as the Python sources",
              file=sys.stderr)
        sys.exit(1)
    print(jar)


if __name__ == "__main__":
    main()
