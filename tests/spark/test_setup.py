"""What `kanal audit` / `kanal analytics` need is said in one line when it is missing (no traceback), and
the batch-only sources refuse streaming and writing with a sentence, not NOT_IMPLEMENTED."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def _kanal(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kanal.deploy.cli", *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["audit", "analytics"])
def test_missing_pyspark_is_one_line_saying_what_to_install(tmp_path, command):
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named pyspark (test)')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = _kanal([command, "--data-dir", str(tmp_path), "--quiet"], env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pyspark" in lines[0] and "bash deploy/bootstrap.sh spark" in lines[0], (
        done.stderr
    )


def test_missing_java_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it: no java
    done = _kanal(["audit", "--data-dir", str(tmp_path), "--quiet"], env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Java runtime" in done.stderr, done.stderr


def test_read_stream_says_kanal_log_is_batch_only(spark, tmp_path):
    with pytest.raises(Exception, match="batch-only") as err:
        query = (spark.readStream.format("kanal-log").load(str(tmp_path)).writeStream.format("memory")
                 .queryName("refused_kanal_log").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    assert "NOT_IMPLEMENTED" not in str(err.value)


@pytest.mark.parametrize("source,kind", [("kanal-log", "batch-only"), ("kanal-metadata", "read-only")])
def test_writing_to_the_file_sources_is_refused(spark, tmp_path, source, kind):
    with pytest.raises(Exception, match=kind) as err:
        spark.createDataFrame([(b"k", b"v")], "key binary, value binary").write.format(source).mode(
            "append"
        ).save(str(tmp_path / "out"))
    assert "NOT_IMPLEMENTED" not in str(err.value)
