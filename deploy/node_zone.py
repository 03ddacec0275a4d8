"""`kanal node-zone`: write the zone of the Kubernetes node this pod runs on to a file, for the broker's rack.

    kanal node-zone --output /var/run/kanal/rack          # an init container; NODE_NAME from the downward API

A pod cannot read its node's labels through the downward API, so the broker StatefulSet runs this first, in an
init container of the same image, with a service account allowed to `get` nodes (deploy/k8s/base/rbac.yaml):
it asks the API server for `/api/v1/nodes/$NODE_NAME` and writes the node's `topology.kubernetes.io/zone`
label (or the deprecated `failure-domain.beta.kubernetes.io/zone` on old clusters) to the file, on an emptyDir
the broker container mounts too; the broker reads it with `--rack-file` (KANAL_RACK_FILE). The file holds the
zone and a newline, or only a newline when the node has no zone label (no rack: placement ignores racks).

Where the API server is and who this pod is come from what Kubernetes puts in every pod:
KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT, and the service account's token, CA certificate under
/var/run/secrets/kubernetes.io/serviceaccount/. `--api-server URL`, `--token-file` and `--ca-file` override
them (tests point them at a local server). The token is re-read per run, never logged.

Errors are one line on stderr and a non-zero exit (the pod then restarts the init container, and the broker
never starts with a rack it did not mean): 2 for bad flags or a missing NODE_NAME, 1 when the API server
cannot be asked or refuses (e.g. 403: the ClusterRole binding is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kanal.commands.report import CommandParser, command_error
from kanal.v1.error import ErrorCode

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REQUEST_TIMEOUT_S = 10.0
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class NodeZoneError(Exception):
    """The zone could not be read; the message is one line."""


@dataclass(frozen=True, slots=True)
class ApiAccess:
    base_url: str  # https://HOST:PORT, no trailing slash
    token: str
    ca_file: Path | None  # None: the system's trust store


def zone_of(node: Mapping) -> str:
    """The zone label of a Node object ("" when it has none)."""
    labels = node.get("metadata", {}).get("labels") or {}
    for key in ZONE_LABELS:
        if labels.get(key):
            return str(labels[key])
    return ""


def read_node(access: ApiAccess, node_name: str, timeout_s: float = REQUEST_TIMEOUT_S) -> Mapping:
    """GET /api/v1/nodes/NAME with the bearer token; the decoded Node object."""
    url = f"{access.base_url}/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {access.token}",
                                                   "Accept": "application/json"})
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(access.ca_file) if access.ca_file else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").replace("\n", " ")
        raise NodeZoneError(f"GET {url}: HTTP {exc.code} {detail}".strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NodeZoneError(f"GET {url}: {reason}") from None
    try:
        node = json.loads(body)
    except ValueError:
        raise NodeZoneError(f"GET {url}: the answer is not JSON") from None
    if not isinstance(node, dict) or node.get("kind") not in (None, "Node"):
        raise NodeZoneError(f"GET {url}: the answer is not a Node object")
    return node


def write_zone(path: Path, zone: str) -> None:
    """Write atomically: a broker that starts never sees half a zone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(zone + "\n")
    os.replace(partial, path)


def access_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ApiAccess:
    base = args.api_server
    if not base:
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise NodeZoneError(
                "KUBERNETES_SERVICE_HOST is not set: not in a pod? (or give --api-server URL)"
            )
        base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    try:
        token = Path(args.token_file).read_text().strip()
    except OSError as exc:
        raise NodeZoneError(f"--token-file {args.token_file}: {exc.strerror}") from None
    ca = Path(args.ca_file) if args.ca_file else None
    if ca is not None and not ca.is_file():
        raise NodeZoneError(f"--ca-file {ca}: no such file")
    return ApiAccess(base.rstrip("/"), token, ca)


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="kanal node-zone", description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument(
        "--output", required=True, type=Path, help="file to write the zone to (the broker's --rack-file)"
    )
    p.add_argument("--node", default=None, help="node name (default: $NODE_NAME, from the downward API)")
    p.add_argument(
        "--api-server", default="", help="API server URL (default: from KUBERNETES_SERVICE_HOST/PORT)"
    )
    p.add_argument("--token-file", default=str(SERVICE_ACCOUNT_DIR / "token"),
                   help="the service account token (default: the mounted one)")
    p.add_argument("--ca-file", default=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
                   help="the API server's CA certificate (default: the mounted one)")
    return p


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    node_name = args.node or environ.get("NODE_NAME", "")
    if not node_name:
        return command_error(
            "kanal node-zone: error",
            "no node name: set NODE_NAME (fieldRef spec.nodeName) or --node",
            exit_status=EXIT_USAGE,
        )
    try:
        zone = zone_of(read_node(access_from(args, environ), node_name))
        write_zone(args.output, zone)
    except NodeZoneError as exc:
        return command_error("kanal node-zone: error", str(exc), ErrorCode.BROKER_NOT_AVAILABLE)
    except OSError as exc:
        return command_error("kanal node-zone: error", f"cannot write {args.output}: {exc.strerror}",
                             ErrorCode.STORAGE_ERROR)
    print(f"kanal node-zone: node {node_name} is in zone {zone!r}" if zone
          else f"kanal node-zone: node {node_name} has no zone label; no rack")
    return EXIT_OK
