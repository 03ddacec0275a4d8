"""deploy/kafka_jars.sh's kinds, without Maven (MVN is /bin/false): an unknown kind is refused with the
kinds the script has, and the mirrormaker kind's artifact set is the one its DEST/KIND/.complete names, so a
gathered set is left alone and another MM2_VERSION gathers again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "kafka_jars.sh"
MIRRORMAKER_SET = ("org.apache.kafka:connect-mirror:4.3.1 org.apache.kafka:connect-mirror-client:4.3.1 "
                   "org.apache.kafka:connect-runtime:4.3.1 org.apache.logging.log4j:log4j-slf4j-impl:2.25.5")


def kafka_jars(dest: Path, kind: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("KAFKA_VERSION", "MM2_VERSION", "LOG4J_VERSION", "SLF4J_VERSION")}
    return subprocess.run(["bash", str(SCRIPT), str(dest), kind], env={**base, "MVN": "/bin/false", **env},
                          capture_output=True, text=True, timeout=60, check=False)


def test_an_unknown_kind_is_refused_with_the_kinds_there_are(tmp_path):
    result = kafka_jars(tmp_path, "mirror")
    assert result.returncode == 2
    assert "clients|server|mirrormaker" in result.stderr
    assert not any(tmp_path.iterdir())


def test_the_mirrormaker_kind_is_connect_mirror_and_its_runtime_at_one_version(tmp_path):
    out = tmp_path / "mirrormaker"
    out.mkdir()
    (out / ".complete").write_text(f"{MIRRORMAKER_SET}\n2026-12-08T00:00:00Z\n")
    done = kafka_jars(tmp_path, "mirrormaker")
    assert done.returncode == 0 and "already complete" in done.stderr, done.stderr
    other = kafka_jars(tmp_path, "mirrormaker", MM2_VERSION="4.3.0")  # another set: Maven is asked again
    assert other.returncode == 1 and "already complete" not in other.stderr, other.stderr
