"""A private network of Linux network namespaces for `kanal chaos --target dev`: one namespace per node,
joined by veth pairs to a bridge, so the network between nodes can be cut without touching the host's own
rules. Needs root (CAP_NET_ADMIN), `ip` and `iptables`.

Layout (P is the runner's PID; interface names are at most 15 characters, hence the short `kc` prefix):

    namespace kanal-chaos-P-hub      bridge `br0`; ports kcP-<i>p (one per node) and kcP-hp (the host's)
    namespace kanal-chaos-P-<node>   interface kcP-<i> at 10.213.S.(10+i)/24, `lo` up
    host namespace                   interface kcP-h at 10.213.S.1/24: the runner, its clients and monitors

S is a /24 no route of the host uses yet. The bridge lives in its own namespace, not the host's: the host's
FORWARD chain (Docker sets its policy to DROP) and bridge netfilter would otherwise judge traffic between
nodes. The host reaches the nodes over its own veth (its OUTPUT/INPUT, never FORWARD), and nothing is
routed anywhere else.

Faults (each undone by `heal()`; everything is removed by `close()`, by name, also after a failure):
- `isolate(node)`: the node's bridge port goes down, cutting it from every node and from the clients.
- `drop(src, dst)`: packets from `src` are dropped at `dst` (iptables in `dst`'s namespace): a one-way
  cut. Both directions make a two-way cut between two nodes.
- `flaky(node, probability)`: `-m statistic --mode random` drops that share of the node's packets, in
  and out (no netem in every kernel; this needs only iptables).
Rules live in the chain KANAL-CHAOS of each node's namespace (jumped to from INPUT and OUTPUT); the host's
iptables are never read or written.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Self

log = logging.getLogger("kanal.chaos.netns")

CHAIN = "KANAL-CHAOS"
SUBNET_FIRST = 20  # 10.213.20.0/24 upwards
SUBNET_COUNT = 200


class NetworkError(RuntimeError):
    pass


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def free_subnet(pid: int) -> ipaddress.IPv4Network:
    """A 10.213.S.0/24 that no route of the host overlaps, starting from one the PID picks."""
    routes = _run("ip", "-4", "route", "show", "table", "all").stdout
    used = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        if word.startswith(("local", "broadcast")):
            word = line.split()[1]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for k in range(SUBNET_COUNT):
        net = ipaddress.IPv4Network(f"10.213.{SUBNET_FIRST + (pid + k) % SUBNET_COUNT}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetworkError("no free 10.213.S.0/24 for the chaos network")


@dataclass
class Member:
    name: str  # the node's name, e.g. "broker-1"
    index: int
    namespace: str
    interface: str  # inside the node's namespace
    port: str  # its peer: the bridge port in the hub namespace
    address: str


class ChaosNetwork:
    def __init__(self, node_names: list[str], *, pid: int | None = None,
                 attach: dict[str, int] | None = None) -> None:
        """`attach`: nodes whose network namespace already exists, as the PID of a process in it (a
        container's sandbox); they are given their namespace name with `ip netns attach` instead of a new
        namespace, and the rest is the same."""
        self.pid = os.getpid() if pid is None else pid
        self._attach = dict(attach or {})
        self.prefix = f"kanal-chaos-{self.pid}"
        self.short = f"kc{self.pid}"
        if len(f"{self.short}-{len(node_names)}p") > 15:
            raise NetworkError(f"pid {self.pid} makes interface names longer than 15 characters")
        self.hub = f"{self.prefix}-hub"
        self.host_interface = f"{self.short}-h"
        self.subnet: ipaddress.IPv4Network | None = None
        self.members: dict[str, Member] = {}
        self._names = list(node_names)
        self._created_namespaces: list[str] = []
        self._host_link = False

    def __repr__(self) -> str:
        return f"<ChaosNetwork {self.prefix} {self.subnet} nodes={list(self.members)}>"

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def host_address(self) -> str:
        if self.subnet is None:
            raise NetworkError("the chaos network is not open")
        return str(self.subnet.network_address + 1)

    def launcher(self, node_name: str) -> list[str]:
        """The argv prefix that runs a command inside the node's namespace."""
        return ["ip", "netns", "exec", self.members[node_name].namespace]

    def open(self) -> None:
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        self.subnet = free_subnet(self.pid)
        self._namespace(self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        # the host's end
        _run("ip", "link", "add", self.host_interface, "type", "veth", "peer", "name", f"{self.short}-hp")
        self._host_link = True
        self._to_bridge(f"{self.short}-hp")
        _run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.host_interface)
        _run("ip", "link", "set", self.host_interface, "up")
        for i, name in enumerate(self._names):
            member = Member(name, i, f"{self.prefix}-{name}", f"{self.short}-{i}", f"{self.short}-{i}p",
                            str(self.subnet.network_address + 10 + i))
            self._namespace(member.namespace, self._attach.get(name))
            # Made inside the node's namespace and its peer moved to the hub, so nothing of it is ever in
            # the host namespace (where a name could collide with another run's).
            _run("ip", "-n", member.namespace, "link", "add", member.interface, "type", "veth", "peer",
                 "name", member.port)
            _run("ip", "-n", member.namespace, "link", "set", member.port, "netns", self.hub)
            self._to_bridge(member.port)
            _run("ip", "-n", member.namespace, "addr", "add", f"{member.address}/24", "dev", member.interface)
            _run("ip", "-n", member.namespace, "link", "set", member.interface, "up")
            ns = ["ip", "netns", "exec", member.namespace, "iptables", "-w"]
            _run(*ns, "-N", CHAIN)
            _run(*ns, "-A", "INPUT", "-j", CHAIN)
            _run(*ns, "-A", "OUTPUT", "-j", CHAIN)
            self.members[name] = member
        log.info("chaos network up: %r", self)

    def _namespace(self, name: str, pid: int | None = None) -> None:
        if pid is None:
            _run("ip", "netns", "add", name)
        else:
            # Only a name for a namespace a process holds: `ip netns del` removes the name, and the
            # namespace (with the node's veth end) goes when that process exits.
            _run("ip", "netns", "attach", name, str(pid))
        self._created_namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def _to_bridge(self, port: str) -> None:
        if port == f"{self.short}-hp":
            _run("ip", "link", "set", port, "netns", self.hub)
        _run("ip", "-n", self.hub, "link", "set", port, "master", "br0")
        _run("ip", "-n", self.hub, "link", "set", port, "up")

    # ---- faults ----

    def _iptables(self, node: str, *rule: str) -> None:
        _run("ip", "netns", "exec", self.members[node].namespace, "iptables", "-w", *rule)

    def isolate(self, node: str) -> None:
        _run("ip", "-n", self.hub, "link", "set", self.members[node].port, "down")

    def drop(self, src: str, dst: str) -> None:
        """Packets from `src` are dropped when they reach `dst`."""
        self._iptables(dst, "-A", CHAIN, "-s", self.members[src].address, "-j", "DROP")

    def cut(self, a: str, b: str) -> None:
        self.drop(a, b)
        self.drop(b, a)

    def flaky(self, node: str, probability: float) -> None:
        if not 0 < probability < 1:
            raise ValueError("probability must be in (0, 1)")
        for direction in ("-i", "-o"):
            self._iptables(node, "-A", CHAIN, direction, self.members[node].interface, "-m", "statistic",
                           "--mode", "random", "--probability", f"{probability:.3f}", "-j", "DROP")

    def heal(self) -> None:
        """Every fault undone: every bridge port up, every node's chain empty."""
        for member in self.members.values():
            _run("ip", "-n", self.hub, "link", "set", member.port, "up")
            self._iptables(member.name, "-F", CHAIN)

    def close(self) -> None:
        """Remove everything this network made, by name; carries on past failures and logs them."""
        if self._host_link:
            # The host's veth end; deleting the hub namespace would remove its peer, and with it this end,
            # but an explicit delete leaves nothing to chance.
            _run("ip", "link", "del", self.host_interface, check=False)
            self._host_link = False
        for name in reversed(self._created_namespaces):
            result = _run("ip", "netns", "del", name, check=False)
            if result.returncode != 0:
                log.warning("could not delete namespace %s: %s", name, result.stderr.strip())
        self._created_namespaces.clear()
        self.members.clear()


def leftovers(pid: int) -> list[str]:
    """Namespaces and host links of a run with this PID still present (empty after close())."""
    prefix, short = f"kanal-chaos-{pid}-", f"kc{pid}-"
    namespaces = [line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line.strip()]
    links = [
        line.split(":")[1].strip().split("@")[0] for line in _run("ip", "-o", "link").stdout.splitlines()
    ]
    return [n for n in namespaces if n.startswith(prefix)] + [
        name for name in links if name.startswith(short)
    ]
