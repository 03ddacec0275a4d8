"""Start and stop a single-node Apache Kafka (KRaft, broker+controller) for tests.

Python 3.11 standard library only. Needs Java 17+ and the jars gathered by
``deploy/kafka_jars.sh .kafka-jars server`` (.kafka-jars/server/*.jar).

    proc, bootstrap = start_kafka(workdir)      # "127.0.0.1:PORT"
    ...
    stop_kafka(proc)

Everything listens on 127.0.0.1 only, on ports picked at run time. The broker's
data, configuration and logs all live under ``workdir``.

As a script: ``python3 benchmarks/apache_kafka.py [--jars DIR] [--workdir DIR]
[--smoke]`` starts a broker, prints its bootstrap address and timings, and runs
until interrupted (or, with --smoke, stops it at once).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_JARS = Path(os.environ.get("KAFKA_SERVER_JARS", HERE.parent / ".kafka-jars" / "server"))

# Broker settings that a one-node cluster needs (the internal topics default to
# replication factor 3 and would never be created) or that make tests faster.
BASE_PROPERTIES = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # A consumer group's first join would otherwise wait 3 s for more members.
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
}

LOG4J2_TEMPLATE = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaStartError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, URL-safe base64, no padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # Kafka never hands out ids starting with '-'
            return cid


def java_command() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaStartError("java not found (set JAVA_HOME or put java on PATH)")
    return found


def write_properties(path: Path, props: dict[str, str]) -> None:
    # Kafka reads java.util.Properties: escape backslashes (Windows-free here,
    # but cheap to be correct).
    lines = [f"{k}={str(v).replace(chr(92), chr(92) * 2)}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n")


def _kafka_request(host: str, port: int, api_key: int, api_version: int,
                   body: bytes, timeout: float) -> bytes:
    """Send one request (non-flexible header v1) and return the response body."""
    client_id = b"kanal-probe"
    header = struct.pack(">hhih", api_key, api_version, 1, len(client_id)) + client_id
    payload = header + body
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        raw = _recv_exact(s, 4)
        (size,) = struct.unpack(">i", raw)
        resp = _recv_exact(s, size)
    (corr,) = struct.unpack(">i", resp[:4])
    if corr != 1:
        raise OSError(f"unexpected correlation id {corr}")
    return resp[4:]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return bytes(buf)


def broker_ready(host: str, port: int, timeout: float = 2.0) -> bool:
    """True once the broker answers a Metadata request listing itself.

    A listening socket completes TCP handshakes before the broker processes
    requests, and a broker that answers may still be fenced; an unfenced
    broker is one that Metadata lists. Metadata v4: topics=[] (none),
    allow_auto_topic_creation=false.
    """
    try:
        body = _kafka_request(host, port, 3, 4, struct.pack(">i?", 0, False), timeout)
    except OSError:
        return False
    # throttle_time_ms int32, brokers array (int32 count, ...)
    (_, n_brokers) = struct.unpack(">ii", body[:8])
    return n_brokers > 0


def port_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def jvm_argv(jars: Path, workdir: Path, log_file: Path, heap: str = "1g",
             jvm_args: list[str] | None = None) -> list[str]:
    """java and its options for a JVM of Apache Kafka's (a broker, a tool, MirrorMaker 2): the jars of
    `jars` on the class path, logging through log4j2 to `log_file` (its config written into `workdir`)."""
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2_TEMPLATE.format(log_file=log_file))
    return [java_command(), f"-Xmx{heap}", "-Xms256m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={log_file.parent}",
            *(jvm_args or []), "-cp", str(jars / "*")]


def spawn_jvm(argv: list[str], out_file: Path, cwd: Path) -> subprocess.Popen:
    """Start `argv` with its stdout and stderr appended to `out_file`; stop it with stop_kafka."""
    out = open(out_file, "ab")  # noqa: SIM115 - closed below once the JVM holds its own copy
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    finally:
        out.close()


def start_kafka(workdir, jars_dir=None, *, heap: str = "1g", timeout: float = 90.0,
                quorum: str = "standalone", extra_properties: dict | None = None,
                format_args: list[str] | None = None, jvm_args: list[str] | None = None,
                port: int | None = None, controller_port: int | None = None):
    """Format and start a one-node KRaft Kafka in ``workdir``.

    Returns ``(process, bootstrap)`` where bootstrap is ``"127.0.0.1:PORT"``.
    ``quorum``: "standalone" (controller.quorum.bootstrap.servers, formatted
    with --standalone: a dynamic KRaft quorum of one) or "static"
    (controller.quorum.voters=1@127.0.0.1:Q). ``extra_properties`` override
    or add broker properties (e.g. SASL/TLS listeners); ``format_args`` are
    added to the storage format command (e.g. ["--add-scram",
    "SCRAM-SHA-256=[name=alice,password=alice-secret]"]).
    ``port``/``controller_port``: fixed ports (e.g. to restart a broker on
    the address its clients know, ``proc.kanal_ports``); default: free ports
    picked now (another process could take one before Kafka binds it, which
    then shows as a startup failure: retry).
    The process's attribute ``kanal_timings`` holds the measured seconds.
    """
    t0 = time.monotonic()
    workdir = Path(workdir).resolve()
    jars = Path(jars_dir or DEFAULT_JARS).resolve()
    if not list(jars.glob("kafka_2.13-*.jar")):
        raise KafkaStartError(f"no kafka_2.13 jar in {jars}; run deploy/kafka_jars.sh .kafka-jars server")
    java_command()  # fails now, before anything is written, when there is no java

    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    logs_dir = workdir / "logs"
    logs_dir.mkdir(exist_ok=True)

    host = "127.0.0.1"
    port = port or free_port(host)
    cport = controller_port or free_port(host)
    while cport == port:
        cport = free_port(host)

    props = dict(BASE_PROPERTIES)
    props.update({
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
        "log.dirs": str(data_dir),
    })
    if quorum == "standalone":
        props["controller.quorum.bootstrap.servers"] = f"{host}:{cport}"
    elif quorum == "static":
        props["controller.quorum.voters"] = f"1@{host}:{cport}"
    else:
        raise ValueError("quorum must be 'standalone' or 'static'")
    if extra_properties:
        props.update({k: str(v) for k, v in extra_properties.items()})
    config = workdir / "server.properties"
    write_properties(config, props)
    # The readiness probe speaks plain Kafka protocol; with SASL/TLS on the
    # client listener, wait for the broker's "Kafka Server started" log line
    # (logged once it is unfenced) instead.
    protocol_map = dict(x.split(":", 1) for x in props["listener.security.protocol.map"].split(","))
    plaintext = protocol_map.get("PLAINTEXT", "PLAINTEXT") == "PLAINTEXT"

    jvm = jvm_argv(jars, workdir, logs_dir / "server.log", heap, jvm_args)

    # 1. Format the storage (once: a formatted data dir is reused on restart).
    cluster_id_file = workdir / "cluster.id"
    if not (data_dir / "meta.properties").exists():
        cluster_id = random_cluster_id()
        cmd = [*jvm, "kafka.tools.StorageTool", "format", "--config", str(config),
               "--cluster-id", cluster_id]
        if quorum == "standalone":
            cmd.append("--standalone")
        cmd += format_args or []
        fmt = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=timeout, check=False)
        if fmt.returncode != 0:
            raise KafkaStartError(f"storage format failed ({fmt.returncode}):\n"
                                  f"{fmt.stdout}\n{fmt.stderr}")
        cluster_id_file.write_text(cluster_id + "\n")
    t_formatted = time.monotonic()

    # 2. Start the server.
    proc = spawn_jvm([*jvm, "kafka.Kafka", str(config)], logs_dir / "kafka.out", workdir)
    t_spawned = time.monotonic()

    # 3. Wait until the port accepts, then until the broker is unfenced.
    # Any failure or interrupt here must not leave the JVM behind.
    try:
        deadline = t_spawned + timeout
        t_port = None
        while True:
            if proc.poll() is not None:
                raise KafkaStartError(
                    f"kafka exited with {proc.returncode} during startup\n"
                    f"--- kafka.out ---\n{log_tail(logs_dir / 'kafka.out')}\n"
                    f"--- server.log ---\n{log_tail(logs_dir / 'server.log')}")
            if t_port is None and port_accepts(host, port):
                t_port = time.monotonic()
            if t_port is not None and (
                    broker_ready(host, port) if plaintext
                    else "Kafka Server started" in log_tail(logs_dir / "server.log", 400)):
                break
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"kafka not ready on {host}:{port} after {timeout:.0f} s\n"
                    f"--- server.log ---\n{log_tail(logs_dir / 'server.log')}")
            time.sleep(0.05)
    except BaseException:
        stop_kafka(proc)
        raise
    t_ready = time.monotonic()

    proc.kanal_timings = {
        "format_s": round(t_formatted - t0, 2),
        "port_open_s": round(t_port - t_spawned, 2),
        "ready_s": round(t_ready - t_spawned, 2),
        "total_s": round(t_ready - t0, 2),
    }
    proc.kanal_workdir = workdir
    proc.kanal_ports = (port, cport)
    return proc, f"{host}:{port}"


def stop_kafka(process, timeout: float = 30.0) -> int:
    """SIGTERM (controlled shutdown) the broker, or any JVM of spawn_jvm, by PID; SIGKILL after timeout."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jars", default=str(DEFAULT_JARS))
    ap.add_argument("--workdir", help="default: a new temporary directory (removed on exit)")
    ap.add_argument("--quorum", choices=["standalone", "static"], default="standalone")
    ap.add_argument("--smoke", action="store_true", help="stop right after startup")
    ap.add_argument("--prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker property (repeatable)")
    args = ap.parse_args(argv)

    tmp = None
    workdir = args.workdir
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="kafka-")
        workdir = tmp
    # Stop the broker on SIGTERM/SIGINT too: a shell's background job starts
    # with SIGINT ignored, so set the handlers explicitly.
    def _stop_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _stop_signal)
    signal.signal(signal.SIGINT, _stop_signal)

    proc = None
    try:
        proc, bootstrap = start_kafka(workdir, args.jars, quorum=args.quorum,
                                      extra_properties=dict(kv.split("=", 1) for kv in args.prop))
        print(f"kafka pid={proc.pid} bootstrap={bootstrap} workdir={workdir} "
              f"timings={proc.kanal_timings}", flush=True)
        if not args.smoke:
            proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc is not None:
            t = time.monotonic()
            rc = stop_kafka(proc)
            print(f"kafka stopped rc={rc} in {time.monotonic() - t:.2f} s", flush=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
