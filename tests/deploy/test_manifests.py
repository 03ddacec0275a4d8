"""The Kubernetes manifests (deploy/k8s): both overlays render and pass `kubernetes-validate --strict`
offline; they carry what the issue asks of them; every KANAL_* setting is a flag of its command; and the
container fixture runs exactly what they render (tests/containers/cluster.py), so the two cannot drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kanal.broker.broker_main import build_parser as broker_parser
from kanal.deploy.mirror.config import load_config
from kanal.deploy.mirror.main import flows_from
from kanal.deploy.mirror.main import parser as mirror_parser
from kanal.raft.controller_config import build_parser as controller_parser
from kanal.server.flags import env_name

from ..containers.cluster import (
    BROKERS,
    CLIENT_CONFIG,
    CONTROLLERS,
    LOCALIZED,
    TEST_SPEED,
    TLS_KEYS,
    TLS_MOUNT,
    ContainerCluster,
)
from ..containers.manifests import PodProcess, find, kubectl, pod_process, render, render_text

OVERLAYS = {"dev": 1, "production": 3}


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_the_overlay_renders_and_validates_strictly(overlay, tmp_path):
    rendered = tmp_path / f"{overlay}.yaml"
    rendered.write_text(render_text(overlay))
    validator = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(validator), "--strict", "-k", "1.37.0", "--quiet", str(rendered)],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_the_overlay_has_what_a_deployment_needs(overlay):
    docs = render(overlay)
    size = OVERLAYS[overlay]
    for sts_name in (CONTROLLERS, BROKERS):
        sts = find(docs, "StatefulSet", sts_name)
        assert sts["spec"]["replicas"] == size and sts["spec"]["serviceName"] == sts_name
        assert find(docs, "Service", sts_name)["spec"]["clusterIP"] == "None"
        pod = sts["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["enableServiceLinks"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        ready, alive = container["readinessProbe"], container["livenessProbe"]
        if "exec" in ready:  # TLS (production): the kubelet's gRPC probe cannot speak it
            assert "--service" not in ready["exec"]["command"]
            command = alive["exec"]["command"]
            assert command[command.index("--service") + 1] == "kanal.liveness"
        else:
            assert ready["grpc"] and alive["grpc"]["service"] == "kanal.liveness"
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert pod["affinity"]["podAntiAffinity"]
        assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        assert find(docs, "PodDisruptionBudget", sts_name)["spec"]["maxUnavailable"] == 1
        # Every pod is configured from the ConfigMap and its own name alone.
        for ordinal in range(size):
            process = pod_process(docs, sts_name, ordinal)
            assert process.env["KANAL_ID_FROM_HOSTNAME"] == "true" and process.env["HOSTNAME"].endswith(
                f"-{ordinal}"
            )
    for sts_name in (CONTROLLERS, BROKERS):  # both kinds of node are scraped, on the port they serve metrics
        template = find(docs, "StatefulSet", sts_name)["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert (
            pod_process(docs, sts_name, 0).env["KANAL_METRICS"]
            == f"0.0.0.0:{annotations['prometheus.io/port']}"
        )
        ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        assert str(ports["metrics"]) == annotations["prometheus.io/port"]
    # The quorum follows from the ordinals: one peer per controller pod, named by its ordinal.
    peers = pod_process(docs, CONTROLLERS, 0).env["KANAL_PEERS"].split(",")
    assert [p.split("=")[0] for p in peers] == [str(i) for i in range(size)]
    assert all(f"kanal-controller-{i}.kanal-controller:" in p for i, p in enumerate(peers))
    assert len(pod_process(docs, BROKERS, 0).env["KANAL_CONTROLLERS"].split(",")) == size
    advertised = pod_process(docs, BROKERS, size - 1).env["KANAL_ADVERTISE"]
    namespace = find(docs, "StatefulSet", BROKERS)["metadata"]["namespace"]
    assert advertised == f"kanal-broker-{size - 1}.kanal-broker.{namespace}.svc:9092"
    assert find(docs, "Service", "kanal")["spec"]["ports"][0]["port"] == 9092
    # Kafka clients: every broker serves the Kafka protocol on 9094 under its own stable name, and the
    # client Service bootstraps them there; the flags parse as the broker parses them.
    broker = pod_process(docs, BROKERS, size - 1)
    assert broker.env["KANAL_KAFKA_ADVERTISE"] == f"kanal-broker-{size - 1}.kanal-broker.{namespace}.svc:9094"
    assert broker.env["KANAL_KAFKA_LISTEN"] == "0.0.0.0:9094"
    assert {p["name"]: p["port"] for p in find(docs, "Service", "kanal")["spec"]["ports"]}["kafka"] == 9094
    container = find(docs, "StatefulSet", BROKERS)["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["kafka"] == 9094
    audit = find(docs, "CronJob", "kanal-audit")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert audit["args"][0] == "audit" and "spark" in audit["image"]
    assert (
        "spark"
        not in find(docs, "StatefulSet", BROKERS)["spec"]["template"]["spec"]["containers"][0]["image"]
    )


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_the_brokers_rack_comes_from_the_nodes_zone(overlay):
    docs = render(overlay)
    pod = find(docs, "StatefulSet", BROKERS)["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    broker = pod["containers"][0]
    rack_file = pod_process(docs, BROKERS, 0).env["KANAL_RACK_FILE"]
    # The init container (same image) writes the file the broker reads, on a volume both mount.
    assert init["image"] == broker["image"] and init["args"][:3] == ["node-zone", "--output", rack_file]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in init["env"]} == {
        "NODE_NAME": "spec.nodeName"
    }
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert any(m["name"] == "rack" and rack_file.startswith(m["mountPath"] + "/") and m["readOnly"]
               for m in broker["volumeMounts"])
    assert rack_file.startswith(mounts["rack"] + "/")
    assert init["securityContext"]["readOnlyRootFilesystem"] is True and init["resources"]["limits"]
    # Only the init container holds an API token, from the service account bound to "get nodes".
    assert pod["automountServiceAccountToken"] is False
    assert mounts["node-reader-token"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert "node-reader-token" not in {m["name"] for m in broker["volumeMounts"]}
    account = pod["serviceAccountName"]
    namespace = find(docs, "StatefulSet", BROKERS)["metadata"]["namespace"]
    assert find(docs, "ServiceAccount", account)["metadata"]["namespace"] == namespace
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding"
                   and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in d["subjects"])
    role = find(docs, "ClusterRole", binding["roleRef"]["name"])
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_setting_is_a_flag_of_its_command(overlay):
    docs = render(overlay)
    for sts_name, parser in ((CONTROLLERS, controller_parser), (BROKERS, broker_parser)):
        flags = {env_name(a.dest) for a in parser()._actions if a.option_strings}
        settings = {k for k in pod_process(docs, sts_name, 0).env if k.startswith("KANAL_")}
        assert settings <= flags, f"{sts_name}: not flags of the command: {settings - flags}"
        assert set(TEST_SPEED[sts_name]) <= flags


@pytest.mark.parametrize("tls", [False, True])
def test_the_container_fixture_runs_what_the_manifests_render(tmp_path, tls):
    docs = render("production")
    cluster = ContainerCluster("drift", tmp_path, tls=tls)
    for node in cluster.nodes:
        sts = CONTROLLERS if node.kind == "controller" else BROKERS
        rendered = pod_process(docs, sts, node.node_id)
        if not tls:  # the plaintext cluster of most container tests: the production overlay without TLS
            assert TLS_KEYS[sts] <= set(rendered.env)
            rendered = PodProcess(rendered.name, rendered.image, rendered.args,
                                  {k: v for k, v in rendered.env.items() if k not in TLS_KEYS[sts]})
        assert node.pod.args == rendered.args == (node.kind,)
        assert set(node.env) == set(rendered.env) | set(TEST_SPEED[sts])
        assert {k: node.env[k] for k in TEST_SPEED[sts]} == TEST_SPEED[sts]
        changed = {k for k in rendered.env if node.env[k] != rendered.env[k]}
        moved = LOCALIZED[sts] & set(rendered.env)  # a plaintext broker has no listener for other nodes
        assert changed == moved, f"{node.name}: {changed ^ moved} differ from the manifests"
        for key in changed:  # only addresses moved to loopback; everything around them is the same
            def shape(value: str) -> str:
                return re.sub(r"[A-Za-z0-9.-]+:\d+", "ADDR", value)

            assert shape(node.env[key]) == shape(rendered.env[key]), key
            assert all(a.startswith("127.0.0.1:") for a in re.findall(r"[A-Za-z0-9.-]+:\d+", node.env[key]))


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_cleanup_labels_reach_the_data_volumes_and_only_controllers_reach_raft(overlay):
    """Issue 40: `kubectl delete pvc -l app.kubernetes.io/part-of=kanal` must match the StatefulSets' data
    volumes (claims take their labels from the claim template), and a NetworkPolicy keeps the Raft port to
    controller pods."""
    docs = render(overlay)
    for sts_name in (CONTROLLERS, BROKERS):
        [claim] = find(docs, "StatefulSet", sts_name)["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kanal"
    policy = find(docs, "NetworkPolicy", "kanal-controller-raft")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": CONTROLLERS}
    raft_rules = [r for r in policy["ingress"] if any(p["port"] == 9093 for p in r["ports"])]
    assert raft_rules == [r for r in policy["ingress"] if "from" in r]
    assert [r["from"] for r in raft_rules] == [[{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": CONTROLLERS}}}]]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_a_broker_pod_stops_only_once_that_is_safe_and_within_its_grace_period(overlay):
    """Issue 40, item 4: the brokers' preStop hook runs `kanal brokers safe-to-stop` for the pod's own id,
    bounded well inside terminationGracePeriodSeconds (the controlled shutdown after it needs a few seconds),
    and the command line it runs parses as the kanal command's."""
    from kanal.clients.cli import build_parser as client_parser

    spec = find(render(overlay), "StatefulSet", BROKERS)["spec"]["template"]["spec"]
    command = spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["sh", "-c"]
    argv = command[2].split()
    assert argv[:4] == ["exec", "kanal", "brokers", "safe-to-stop"]
    args = client_parser().parse_args([a.replace('"${HOSTNAME##*-}"', "2") for a in argv[2:]])
    # With TLS, the check dials the listener for other nodes with the broker's own certificate.
    tls = "KANAL_TLS_CERT_FILE" in pod_process(render(overlay), BROKERS, 0).env
    assert args.id == 2 and args.bootstrap == ("localhost:9093" if tls else "localhost:9092")
    assert (args.command_config == CLIENT_CONFIG) is tls
    # The id: the ordinal at the tail of the pod name, as the shell takes it.
    assert subprocess.run(["sh", "-c", 'echo "${HOSTNAME##*-}"'], env={"HOSTNAME": "kanal-broker-12"},
                          capture_output=True, text=True, check=True).stdout.strip() == "12"
    assert args.wait_ms_max / 1000 + 20 <= spec["terminationGracePeriodSeconds"]


def test_production_serves_tls_only_with_certificates_from_secrets():
    """Issue 40, item 6: the production overlay mounts each StatefulSet's Secret (cert-manager's key names)
    where the TLS flags point, demands client certificates between nodes (controllers on their one
    listener, brokers on their listener for other nodes, advertised under the pod's stable name), takes
    passwords without a certificate on the brokers' client listener, and probes with `kanal health` over
    TLS; the dev overlay stays plaintext."""
    docs = render("production")
    nodes_listener = {"KANAL_INTER_NODE_LISTEN": "0.0.0.0:9093",
                      "KANAL_INTER_NODE_ADVERTISE": "kanal-broker-0.kanal-broker.kanal.svc:9093"}
    for sts_name, client_auth, authentication, extra in (
            (CONTROLLERS, "required", "mtls", {}), (BROKERS, "none", "mtls,password", nodes_listener)):
        env = pod_process(docs, sts_name, 0).env
        assert {k: env[k] for k in TLS_KEYS[sts_name]} == {
            "KANAL_TLS_CERT_FILE": f"{TLS_MOUNT}/tls.crt", "KANAL_TLS_KEY_FILE": f"{TLS_MOUNT}/tls.key",
            "KANAL_TLS_CA_FILE": f"{TLS_MOUNT}/ca.crt", "KANAL_TLS_CLIENT_AUTH": client_auth,
            "KANAL_AUTHENTICATION": authentication, **extra}
        pod = find(docs, "StatefulSet", sts_name)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert volumes["tls"]["secret"]["secretName"] == f"{sts_name}-tls" and mounts["tls"] == TLS_MOUNT
        config_map = find(docs, "ConfigMap", volumes["client-config"]["configMap"]["name"])
        assert f"{mounts['client-config']}/client.toml" == CLIENT_CONFIG
        assert 'tls-cert-file = "/etc/kanal/tls/tls.crt"' in config_map["data"]["client.toml"]
        for probe in ("readinessProbe", "livenessProbe"):
            command = pod["containers"][0][probe]["exec"]["command"]
            assert command[:2] == ["kanal", "health"] and CLIENT_CONFIG in command
    assert not any(k.startswith("KANAL_TLS") for k in pod_process(render("dev"), BROKERS, 0).env)


def test_the_mirror_pod_renders_validates_and_runs_a_valid_command(tmp_path):
    """deploy/k8s/mirror (issue 46): `kanal mirror` as a one-replica Deployment replaced with Recreate (a
    second instance fences the first, a rolling update would make them take turns), its flows from a
    ConfigMap that `kanal mirror`'s own loader accepts, its arguments ones its parser takes."""
    text = subprocess.run([kubectl(), "kustomize", str(Path(__file__).parents[2] / "deploy/k8s/mirror")],
                          check=True, capture_output=True, text=True, timeout=120).stdout
    rendered = tmp_path / "mirror.yaml"
    rendered.write_text(text)
    validator = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(validator), "--strict", "-k", "1.37.0", "--quiet", str(rendered)],
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    docs = [d for d in yaml.safe_load_all(text) if d]
    deployment = find(docs, "Deployment", "kanal-mirror")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert pod["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
    args = container["args"]
    assert args[0] == "mirror"
    parsed = mirror_parser().parse_args(args[1:])
    mount = container["volumeMounts"][0]["mountPath"]
    assert parsed.config == Path(mount) / "mirror.toml"
    (tmp_path / "mirror.toml").write_text(config_map["data"]["mirror.toml"])
    parsed.config = tmp_path / "mirror.toml"
    flows = flows_from(parsed)
    assert flows == load_config(parsed.config) and [f.name for f in flows] == ["east->west"]
