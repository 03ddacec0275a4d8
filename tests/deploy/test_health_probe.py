"""`kanal health` (the exec probe of the production overlay's TLS pods) against a real broker of a local
cluster: SERVING exits 0; an unknown service, an endpoint nobody serves and a bad flag exit non-zero with one
line. Over TLS it is run inside the image's containers (tests/containers/test_tls_containers.py)."""

from __future__ import annotations

import pytest

from kanal.deploy import health_probe
from kanal.deploy.local_cluster import LocalCluster, free_ports

pytestmark = pytest.mark.cluster


def test_kanal_health_says_serving_or_why_not(tmp_path, capsys):
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1)
    try:
        cluster.start(timeout_s=90)
        broker = cluster.brokers[0].endpoint
        assert health_probe.main(["--endpoint", broker], {}) == 0
        assert "SERVING" in capsys.readouterr().out
        assert health_probe.main(["--endpoint", broker, "--service", "kanal.liveness"], {}) == 0
        capsys.readouterr()
        assert health_probe.main(["--endpoint", broker, "--service", "no.such"], {}) == 1
        err = capsys.readouterr().err
        assert err.startswith("kanal health: ") and err.count("\n") == 1, err
    finally:
        cluster.stop()
    [port] = free_ports(1)
    assert health_probe.main(["--endpoint", f"127.0.0.1:{port}", "--timeout-ms", "500"], {}) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
    assert health_probe.main(["--endpoint"], {}) == 2
