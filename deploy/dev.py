"""`kanal dev`: a local cluster — 3 controllers and 3 brokers by default — as processes on 127.0.0.1.

    kanal dev [--data-dir DIR] [--controllers N] [--brokers N] [--tls [--authorizer]]   # until Ctrl-C
              [--racks a,b,c [--replica-selector leader|rack-aware]]
              [--remote-storage [URL] [--remote-storage-endpoint URL]]
    kanal dev status [--output json]                             # every node: pid, state, SERVING or not
    kanal dev restart NODE                                       # e.g. broker-1: back on its data

`kanal dev` waits until every node is SERVING, prints the bootstrap address and writes its state to
`$KANAL_HOME/dev.json` (default ~/.kanal), the file every other `kanal` command reads to find the cluster
without --bootstrap. A node that dies (killed to watch a failover, or crashed) is reported once on stderr
and the rest keep serving; `kanal dev restart NODE` starts it again with the same ports and data. Ctrl-C
or SIGTERM stops every process it started. Data stays in --data-dir (default ~/.kanal/dev-data).

Security: by default the cluster is insecure — plaintext, no authentication, every call User:ANONYMOUS —
and listens on 127.0.0.1 only; it says so when it starts. `--tls` makes a throwaway CA and certificates
(deploy/certificates.py, under DATA_DIR/tls, new at every start) and runs every node with TLS and
authentication by certificate or password (nodes are User:broker-<id> and User:controller-<id>). Each
broker has two listeners, as a Kafka broker with an inter-broker listener: the bootstrap one takes
clients with a password and no certificate (`--tls-client-auth none`), the other (`--inter-node-listen`)
requires a certificate and serves the other nodes and the dev admin. `kanal dev` writes
`$KANAL_HOME/client.toml` (TLS files, the client certificate of User:admin, the brokers' certificate
listeners as bootstrap) that every other `kanal` command picks up while it talks to this cluster
(dev.json's `client_config`; kanal.commands.command_config), and `$KANAL_HOME/password-client.toml` (the
CA and the password bootstrap) for password users: `--command-config` it with `--user`/`--password`.
`--authorizer` turns ACL checks on (super users: the nodes and User:admin). The files go when `kanal dev`
stops.

Racks: `--racks a,b,c` puts the brokers in those racks in turn and turns the brokers' rack-aware replica
selector on (unless `--replica-selector leader`), so rack-aware placement and follower fetching (a
consumer's `--client-rack`) run on one machine.

`status` and `restart` talk to the running `kanal dev` over a Unix socket, `$KANAL_HOME/dev.sock`, whose
path dev.json names (`control`): `kanal dev` started the nodes and is the only one that can restart or
stop them. The protocol is one JSON request line and one JSON reply line per connection:
    {"op": "status"}                      -> {"ok": true, "nodes": [{"name", "kind", "id", "endpoint",
                                               "metrics", "rack", "pid",
                                               "state": "serving"|"starting"|"exited",
                                               "exit_code", "log"}]}
Each node serves Prometheus metrics on a port of its own (`metrics`, HOST:PORT; docs/metrics.md).
    {"op": "restart", "node": "broker-1"} -> {"ok": true, "node": {...}} or {"ok": false, "error": "..."}
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kanal.broker.read_replica import REPLICA_SELECTORS
from kanal.commands.dev_state import dev_state_path, kanal_home, process_alive
from kanal.commands.report import OUTPUT_HELP, CommandParser, command_error
from kanal.deploy.local_cluster import LocalCluster, Node, serving
from kanal.v1.error import ErrorCode

if TYPE_CHECKING:  # cryptography is loaded only for --tls
    from kanal.deploy.certificates import DevTls

KANAL_HOME = kanal_home()
STATE_FILE = dev_state_path()
CONTROL_SOCKET = KANAL_HOME / "dev.sock"
CLIENT_CONFIG = KANAL_HOME / "client.toml"
PASSWORD_CLIENT_CONFIG = KANAL_HOME / "password-client.toml"
# The principal of the client certificate `kanal dev --tls` writes for the other commands.
DEV_CLIENT_NAME = "admin"
# A restart waits at most this long for the node to report SERVING again.
RESTART_READY_S_MAX = 120.0
# One request or reply line on the control socket, at most.
CONTROL_LINE_BYTES_MAX = 1 << 20
# How often the cluster is checked for nodes that died.
WATCH_INTERVAL_S = 0.5


def _racks(text: str) -> tuple[str, ...]:
    racks = tuple(r.strip() for r in text.split(","))
    if not all(racks):
        raise argparse.ArgumentTypeError(f"{text!r}: give rack names separated by commas, none empty")
    return racks


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "status":
        return _status_command(args[1:])
    if args and args[0] == "restart":
        return _restart_command(args[1:])
    return _run(args)


# -- the running cluster ------------------------------------------------------------------------------


def _run(argv: list[str]) -> int:
    p = CommandParser(prog="kanal dev", description=__doc__.splitlines()[0],
                                epilog="Also: `kanal dev status`, `kanal dev restart NODE`.")
    p.add_argument("--data-dir", type=Path, default=KANAL_HOME / "dev-data",
                   help=f"the cluster's data, kept across runs (default {KANAL_HOME / 'dev-data'})")
    p.add_argument("--controllers", type=int, default=3, help="controllers in the quorum, 1..7 (default 3)")
    p.add_argument("--brokers", type=int, default=3, help="brokers, 1..64 (default 3)")
    p.add_argument("--racks", type=_racks, default=(),
                   help="comma-separated racks the brokers take in turn (a,b,c: broker 0 in a, 1 in b, ...), "
                        "for rack-aware placement and follower fetching on one machine")
    p.add_argument("--replica-selector", choices=REPLICA_SELECTORS, default=None,
                   help="which replica serves a consumer that names its rack (the brokers' "
                        "--replica-selector; default rack-aware with --racks, else leader)")
    p.add_argument("--remote-storage", nargs="?", const="", default=None, metavar="URL",
                   help="tiered storage for topics with remote.storage.enable: s3://BUCKET[/PREFIX] or "
                        "file:///DIR (alone: a directory under --data-dir)")
    p.add_argument("--remote-storage-endpoint", default="",
                   help="an S3-compatible endpoint for s3:// remote storage, e.g. http://127.0.0.1:5000")
    p.add_argument("--output", choices=("text", "json"), default="text",
                   help=f"{OUTPUT_HELP} (json: the running cluster, nodes and endpoints, as one JSON "
                   "object on stdout once it is ready; the progress lines go to stderr)")
    p.add_argument(
        "--tls",
        action="store_true",
        help="secure the cluster: a throwaway CA, TLS everywhere, certificates between nodes, passwords "
        "or certificates for clients, a client config for the other commands",
    )
    p.add_argument("--authorizer", action="store_true",
                   help="with --tls: check every call against ACLs (super users: the nodes and User:admin)")
    args = p.parse_args(argv)
    if args.authorizer and not args.tls:
        p.error("--authorizer needs --tls: without TLS every call is User:ANONYMOUS, so no ACL can tell "
                "callers apart")
    if not 1 <= args.controllers <= 7 or not 1 <= args.brokers <= 64:
        p.error("--controllers must be in [1, 7] and --brokers in [1, 64]")
    say = _sayer(args.output == "json")
    running = _running_state()
    if running is not None:
        return command_error("kanal dev", f"a dev cluster is already running (pid {running['pid']}, "
                             f"bootstrap {running['bootstrap']})")
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    tls = None
    if args.tls:
        from kanal.deploy.certificates import make_dev_tls  # cryptography is loaded only for --tls

        tls = make_dev_tls(args.data_dir / "tls", broker_ids=range(args.brokers),
                           controller_ids=range(args.controllers), client_name=DEV_CLIENT_NAME)
    authorizer: list[str] = []
    if args.authorizer:
        supers = [f"User:{name}" for name in (*(tls.nodes if tls else ()), DEV_CLIENT_NAME)]
        authorizer = ["--authorizer", "on", "--super-users", ";".join(supers)]
    if args.remote_storage_endpoint and args.remote_storage is None:
        p.error("--remote-storage-endpoint needs --remote-storage")
    remote: list[str] = []
    if args.remote_storage is not None:
        url = args.remote_storage or (args.data_dir / "remote-storage").resolve().as_uri()
        remote = ["--remote-storage", url]
        if args.remote_storage_endpoint:
            remote += ["--remote-storage-endpoint", args.remote_storage_endpoint]
    selector = args.replica_selector or ("rack-aware" if args.racks else "leader")
    cluster = LocalCluster(args.data_dir, controllers=args.controllers, brokers=args.brokers, tls=tls,
                           node_listeners=tls is not None, kafka_listeners=True,
                           schema_registry_listeners=True, controller_flags=authorizer,
                           broker_flags=[*authorizer, "--replica-selector", selector, *remote],
                           racks=args.racks)
    say(f"kanal dev: starting {args.controllers} controllers and {args.brokers} brokers, data in "
        f"{args.data_dir}")
    if remote:
        say(f"kanal dev: tiered storage in {remote[1]} for topics with remote.storage.enable=true")
    if args.racks:
        say(f"kanal dev: brokers in racks {', '.join(args.racks)} in turn; replica selector {selector} "
            "(consumers with --client-rack read from a replica in their rack)")
    say(f"kanal dev: __consumer_offsets and __transaction_state at replication factor "
        f"{cluster.internal_topics_rf} (the broker count, at most 3), so groups and transactions work here")
    if tls is None:
        say("kanal dev: INSECURE: plaintext gRPC, no authentication (every call is User:ANONYMOUS), "
            "on 127.0.0.1 only; `kanal dev --tls` secures it")
    else:
        say(f"kanal dev: secured: TLS on every node (throwaway CA in {tls.directory}); brokers take "
            "passwords without a certificate on the bootstrap listener, certificates on a listener of "
            "their own for the other nodes and User:admin")
        if args.authorizer:
            say("kanal dev: ACLs enforced (--authorizer on); super users: the nodes and User:admin")
    try:
        cluster.start(timeout_s=120)
    except (RuntimeError, TimeoutError) as exc:
        return command_error("kanal dev", f"the cluster did not start: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)
    supervisor = Supervisor(cluster)
    control: _ControlServer | None = None
    try:
        KANAL_HOME.mkdir(parents=True, exist_ok=True)
        try:
            control = _ControlServer(CONTROL_SOCKET, supervisor)
        except OSError as exc:  # e.g. a socket path longer than AF_UNIX allows (about 107 bytes)
            return command_error("kanal dev", f"cannot serve `kanal dev status` on {CONTROL_SOCKET}: {exc}",
                                 ErrorCode.UNKNOWN_SERVER_ERROR)
        threading.Thread(target=control.serve_forever, name="dev-control", daemon=True).start()
        client_config = None
        if tls is not None:
            client_config = str(_write_client_config(tls, cluster.admin_bootstrap))
            _write_password_client_config(tls, cluster.bootstrap)
        state = {
            "pid": os.getpid(),
            "bootstrap": cluster.bootstrap,
            "admin_bootstrap": cluster.admin_bootstrap,
            "kafka_bootstrap": cluster.kafka_bootstrap,
            "schema_registry": cluster.schema_registry_urls,
            "client_config": client_config,
            "controllers": cluster.controller_endpoints,
            "data_dir": str(args.data_dir),
            "remote_storage": remote[1] if remote else None,
            "control": str(CONTROL_SOCKET),
            "nodes": [_describe(n, check_serving=False) for n in cluster.nodes],
        }
        STATE_FILE.write_text(json.dumps(state))
        if args.output == "json":
            print(json.dumps(state), flush=True)
        say(f"kanal dev: ready. bootstrap: {cluster.bootstrap}")
        say(f"kafka bootstrap: {cluster.kafka_bootstrap}")
        say(f"schema registry: {cluster.schema_registry_urls}")
        for node in cluster.nodes:
            say(f"  {node.name:<13} {node.endpoint:<22} pid {node.pid}  log {node.log_path}")
        say("kanal dev: other kanal commands use this cluster by default; `kanal dev status` and "
            "`kanal dev restart NODE` manage it; Ctrl-C stops it.")
        if client_config is not None:
            say(f"kanal dev: client config (TLS files, User:{DEV_CLIENT_NAME}'s certificate, bootstrap "
                f"{cluster.admin_bootstrap}): {client_config}; the other commands pick it up, other clients "
                "take it with --command-config")
            say(f"kanal dev: password clients (no certificate): --command-config {PASSWORD_CLIENT_CONFIG} "
                "--user NAME --password PASSWORD (`kanal users create` makes one)")
        while not stopping.wait(WATCH_INTERVAL_S):
            for node, code in supervisor.newly_dead():
                print(f"kanal dev: {node.name} exited with status {code} (log {node.log_path}); the "
                      f"other nodes keep serving; `kanal dev restart {node.name}` brings it back on its data",
                      file=sys.stderr, flush=True)
    finally:
        say("kanal dev: stopping")
        if control is not None:
            control.shutdown()
            control.server_close()
        with supervisor.lock:
            cluster.stop()
        STATE_FILE.unlink(missing_ok=True)
        CONTROL_SOCKET.unlink(missing_ok=True)
        if tls is not None:
            CLIENT_CONFIG.unlink(missing_ok=True)
            PASSWORD_CLIENT_CONFIG.unlink(missing_ok=True)
    return 0


def _sayer(to_stderr: bool) -> Callable[[str], None]:
    """Progress lines: stdout in text mode; stderr when stdout carries JSON."""

    def say(text: str) -> None:
        print(text, file=sys.stderr if to_stderr else sys.stdout, flush=True)

    return say


def _write_client_config(tls: DevTls, bootstrap: str) -> Path:
    """$KANAL_HOME/client.toml: what a client needs to reach the secured dev cluster (command_config.py)."""
    lines = ["# written by `kanal dev --tls`; removed when it stops", f'bootstrap = "{bootstrap}"',
             f'tls-ca-file = "{tls.ca.cert}"', f'tls-cert-file = "{tls.client.cert}"',
             f'tls-key-file = "{tls.client.key}"']
    CLIENT_CONFIG.write_text("\n".join(lines) + "\n")
    return CLIENT_CONFIG


def _write_password_client_config(tls: DevTls, bootstrap: str) -> Path:
    """$KANAL_HOME/password-client.toml: the CA and the brokers' password listeners, no certificate; a
    password user adds --user and --password."""
    lines = ["# written by `kanal dev --tls` for password clients; removed when it stops",
             f'bootstrap = "{bootstrap}"', f'tls-ca-file = "{tls.ca.cert}"']
    PASSWORD_CLIENT_CONFIG.write_text("\n".join(lines) + "\n")
    return PASSWORD_CLIENT_CONFIG


class Supervisor:
    """Watches the cluster's nodes and restarts one on request. One lock serialises restarts, the death
    watch and the final stop, so a node being restarted is never reported dead nor stopped half-started."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self._reported: set[str] = set()

    def newly_dead(self) -> list[tuple[Node, int | None]]:
        """Nodes that exited since the last call (each reported once until it is restarted)."""
        with self.lock:
            dead = [n for n in self.cluster.nodes if not n.running and n.name not in self._reported]
            self._reported.update(n.name for n in dead)
            return [(n, n.process.returncode if n.process else None) for n in dead]

    def status(self) -> list[dict]:
        with self.lock:
            nodes = list(self.cluster.nodes)
        return [_describe(n, security=self.cluster.client_security) for n in nodes]

    def restart(self, name: str) -> dict:
        node = next((n for n in self.cluster.nodes if n.name == name), None)
        if node is None:
            known = ", ".join(n.name for n in self.cluster.nodes)
            raise LookupError(f"no node {name!r} in this cluster (nodes: {known})")
        with self.lock:
            self.cluster.restart(node, timeout_s=RESTART_READY_S_MAX)
            self._reported.discard(node.name)
        return _describe(node, security=self.cluster.client_security)


def _describe(node: Node, check_serving: bool = True, security=None) -> dict:
    if not node.running:
        state = "exited"
    elif not check_serving:
        state = "serving"  # only used right after start(), which waited for SERVING
    else:
        state = "serving" if serving(node.endpoint, timeout_s=1.0, security=security) else "starting"
    return {"name": node.name, "kind": node.kind, "id": node.node_id, "endpoint": node.endpoint,
            "metrics": node.extra.get("metrics"), "rack": node.extra.get("rack"), "pid": node.pid,
            "state": state,
            "exit_code": node.process.returncode if node.process and not node.running else None,
            "log": str(node.log_path)}


class _ControlServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, supervisor: Supervisor) -> None:
        path.unlink(missing_ok=True)  # left by a `kanal dev` that was SIGKILLed (dev.json's pid is dead)
        self.supervisor = supervisor
        super().__init__(str(path), _ControlHandler)


class _ControlHandler(socketserver.StreamRequestHandler):
    server: _ControlServer

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline(CONTROL_LINE_BYTES_MAX))
            op = request.get("op")
            if op == "status":
                reply = {"ok": True, "nodes": self.server.supervisor.status()}
            elif op == "restart":
                reply = {"ok": True, "node": self.server.supervisor.restart(str(request.get("node")))}
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except (ValueError, AttributeError) as exc:
            reply = {"ok": False, "error": f"bad request: {exc}"}
        except (LookupError, RuntimeError, TimeoutError) as exc:
            reply = {"ok": False, "error": str(exc)}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


# -- status and restart, from another process ---------------------------------------------------------


def _running_state() -> dict | None:
    """dev.json of a `kanal dev` that still runs, or None."""
    try:
        state = json.loads(STATE_FILE.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state if process_alive(state.get("pid")) else None


def _call(request: dict, timeout_s: float) -> dict:
    state = _running_state()
    if state is None or "control" not in state:
        raise ConnectionError(f"no `kanal dev` cluster is running ({STATE_FILE} not found or stale)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(state["control"])
        s.sendall(json.dumps(request).encode() + b"\n")
        with s.makefile("rb") as reply:
            return json.loads(reply.readline(CONTROL_LINE_BYTES_MAX))


def _status_command(argv: list[str]) -> int:
    p = CommandParser(prog="kanal dev status", description="Show every node of the running kanal dev.")
    p.add_argument("--output", choices=("text", "json"), default="text", help=OUTPUT_HELP)
    args = p.parse_args(argv)
    try:
        reply = _call({"op": "status"}, timeout_s=30)
    except (OSError, ValueError) as exc:
        return command_error(
            "kanal dev status", f"no running `kanal dev` answers: {exc}", ErrorCode.NO_CLUSTER
        )
    nodes = reply["nodes"]
    if args.output == "json":
        print(json.dumps(nodes))
    else:
        for n in nodes:
            extra = f" (exit status {n['exit_code']})" if n["state"] == "exited" else ""
            print(f"{n['name']:<13} {n['endpoint']:<22} metrics {n.get('metrics') or '-':<22} pid "
                  f"{n['pid']!s:<8} {n['state']}{extra}")
    return 0 if all(n["state"] == "serving" for n in nodes) else 3


def _restart_command(argv: list[str]) -> int:
    p = CommandParser(prog="kanal dev restart",
                                description="Restart one node of the running kanal dev on its data.")
    p.add_argument("node", help="a node name as `kanal dev status` shows it, e.g. broker-1 or controller-0")
    p.add_argument("--output", choices=("text", "json"), default="text", help=OUTPUT_HELP)
    args = p.parse_args(argv)
    try:
        reply = _call({"op": "restart", "node": args.node}, timeout_s=RESTART_READY_S_MAX + 30)
    except (OSError, ValueError) as exc:
        return command_error(
            "kanal dev restart", f"no running `kanal dev` answers: {exc}", ErrorCode.NO_CLUSTER
        )
    if not reply.get("ok"):
        return command_error("kanal dev restart", str(reply.get("error")))
    node = reply["node"]
    if args.output == "json":
        print(json.dumps(node))
    else:
        print(f"{node['name']} {node['endpoint']} pid {node['pid']} {node['state']}")
    return 0


