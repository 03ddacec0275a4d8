"""The nemesis: carries out the faults of a schedule (schedule.py) on a target (target.py) and undoes them.

`start(fault)` resolves the fault's roles to nodes (the leader of a partition is asked for at that moment, and
waited for up to half the fault's hold while one is being elected), injects it and records a `nemesis start`
event naming what it hit; `stop(fault)` undoes it and records `nemesis stop`. `heal_all()` undoes whatever is
still in force — every paused node resumed, every network fault removed, every full disk emptied, every
stepped clock set right, every killed or powered-off node started again — and is safe to call at any time and
more than once: the runner calls it in a `finally`, so an exception or Ctrl-C never leaves a fault behind.

A power cut is SIGKILL of the node, then the target drops every write the node did not fsync and mounts its
data directory again (storage.py); the node stays down until the fault ends. A clock fault steps the broker's
wall clock (skewed_clock.py) and restarts the broker on it, since kanal's servers read the wall clock when
they start; its end steps the clock back and restarts the broker again on the true clock. A remote storage
fault fails the store at its proxy (remote_store.py); `kill-mid-upload` stalls the store, SIGKILLs the first
broker caught in the middle of an upload, and lets the store answer again at once: the fault's end
restarts the broker (no upload caught within `CATCH_UPLOAD_S`: recorded as a skip, nothing killed).
"""

from __future__ import annotations

import logging
import time

import grpc

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.chaos.history import Recorder
from kanal.deploy.chaos.schedule import Fault
from kanal.v1.error import KanalError

RESOLVE_INTERVAL_S = 0.25  # between two asks for a role's node (a partition's leader)
RESOLVE_TIMEOUT_MS = 2_000  # one ask's bound (every broker may be down when a fault starts)

log = logging.getLogger("kanal.chaos.nemesis")

FLAKY_DROP_PROBABILITY = 0.3


class Nemesis:
    def __init__(self, target, recorder: Recorder) -> None:
        self.target = target
        self.recorder = recorder
        self.killed: set[str] = set()
        self.paused: set[str] = set()
        self.network_dirty = False
        self.full_disks: set[str] = set()
        self.powered_off: set[str] = set()
        self.skewed: set[str] = set()
        self.remote_failing = False
        self.mirror_killed = False
        self._first_failure: BaseException | None = None
        self.injected: list[tuple[Fault, str]] = []  # each fault started, with the nodes it hit

    def start(self, fault: Fault) -> str:
        """Inject `fault`; returns what it hit ('' when it could not be aimed, e.g. a partition without a
        leader), as recorded."""
        if fault.kind == "remote" and fault.variant == "kill-mid-upload":
            return self._kill_mid_upload(fault)
        # A role waits up to half the fault's hold for a node to fill it: a partition whose leader is being
        # elected (right after the isr-down episode, say) gets one a moment later, and skipping the fault
        # would leave the run without the leader isolation every schedule is meant to hold.
        until = time.monotonic() + max(0.0, fault.end_s - fault.start_s) / 2
        resolved = [self._resolve(t, until) for t in fault.targets]
        nodes = [n for n in resolved if n is not None]
        if len(nodes) < len(resolved):
            self.recorder.record("nemesis", "nemesis", fault=f"{fault.kind}/{fault.variant}", action="skip",
                                 detail=f"no node for {fault.targets}")
            return ""
        detail = ",".join(nodes)
        self.recorder.record("nemesis", "nemesis", fault=f"{fault.kind}/{fault.variant}", action="start",
                             detail=detail)
        if fault.kind == "kill":
            self.killed.add(nodes[0])
            self.target.kill(nodes[0])
        elif fault.kind == "pause":
            self.paused.add(nodes[0])
            self.target.pause(nodes[0])
        elif fault.kind == "partition":
            self.network_dirty = True
            self._partition(fault.variant, nodes)
        elif fault.kind == "disk":
            self.full_disks.add(nodes[0])
            self.target.fill_disk(nodes[0])
        elif fault.kind == "power":
            for node in nodes:  # all of them down before any power is cut: "at once"
                self.powered_off.add(node)
                self.target.kill(node)
            for node in nodes:
                cut = self.target.cut_power(node)
                self.recorder.record(
                    "nemesis",
                    "nemesis",
                    fault=f"{fault.kind}/{fault.variant}",
                    action="cut",
                    detail=f"{node}: {cut['dropped_ops']} writes not fsynced dropped, {cut['kept_ops']} kept",
                    node=node,
                    dropped_writes=int(cut["dropped_ops"]),
                )
        elif fault.kind == "clock":
            self.skewed.add(nodes[0])
            self.target.step_clock(nodes[0], fault.step_s)
            self._restart_now(nodes[0])
        elif fault.kind == "remote":
            self.remote_failing = True
            self.target.remote_store.fail(fault.variant)
        elif fault.kind == "mirror" and fault.variant == "link":
            self.network_dirty = True
            self.target.network.isolate(nodes[0])
        elif fault.kind == "mirror":
            self.mirror_killed = True
            self.target.mirror.kill()
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        self.injected.append((fault, detail))
        return detail

    def _kill_mid_upload(self, fault: Fault) -> str:
        name = f"{fault.kind}/{fault.variant}"
        self.remote_failing = True
        try:
            node: str | None = self.target.catch_upload()
            if node is None:
                self.recorder.record("nemesis", "nemesis", fault=name, action="skip",
                                     detail="no upload caught in the middle")
                return ""
            self.recorder.record("nemesis", "nemesis", fault=name, action="start", detail=node)
            self.killed.add(node)
            self.target.kill(node)
        finally:
            self.target.remote_store.heal()
            self.remote_failing = False
        self.injected.append((fault, node))
        return node

    def _partition(self, variant: str, nodes: list[str]) -> None:
        net = self.target.network
        everyone = self.target.node_names
        controllers = [n for n in everyone if n.startswith("controller-")]
        if variant == "isolate":
            net.isolate(nodes[0])
        elif variant == "controller-split":
            # One controller alone; the other controllers and every broker on the other side. Clients (the
            # host) still reach it, as a client would in a real split.
            for other in everyone:
                if other != nodes[0]:
                    net.cut(nodes[0], other)
        elif variant == "zombie-leader":
            for controller in controllers:
                net.cut(nodes[0], controller)
        elif variant == "leader-alone":
            for other in everyone:
                if other != nodes[0]:
                    net.cut(nodes[0], other)
        elif variant == "one-way":
            net.drop(nodes[0], nodes[1])
        elif variant == "flaky":
            net.flaky(nodes[0], FLAKY_DROP_PROBABILITY)
        else:
            raise ValueError(f"unknown partition variant {variant!r}")

    def stop(self, fault: Fault, detail: str) -> None:
        if not detail:
            return
        if fault.kind == "kill":
            self.target.restart(detail)
            self.killed.discard(detail)
        elif fault.kind == "pause":
            self.target.resume(detail)
            self.paused.discard(detail)
        elif fault.kind == "partition":
            self.target.network.heal()
            self.network_dirty = False
        elif fault.kind == "disk":
            self.target.empty_disk(detail)
            self.full_disks.discard(detail)
        elif fault.kind == "power":
            for node in detail.split(","):
                self.target.restart(node)
                self.powered_off.discard(node)
        elif fault.kind == "clock":
            self._set_clock_right(detail)
            self.skewed.discard(detail)
        elif fault.kind == "remote" and fault.variant == "kill-mid-upload":
            self.target.restart(detail)
            self.killed.discard(detail)
        elif fault.kind == "remote":
            self.target.remote_store.heal()
            self.remote_failing = False
        elif fault.kind == "mirror" and fault.variant == "link":
            self.target.network.heal()
            self.network_dirty = False
        elif fault.kind == "mirror":
            self.target.mirror.start_process()
            self.mirror_killed = False
        self.recorder.record("nemesis", "nemesis", fault=f"{fault.kind}/{fault.variant}", action="stop",
                             detail=detail)
        self.restart_exited()

    def _restart_now(self, node: str) -> None:
        """SIGKILL and start again at once (a crash and a supervisor's restart)."""
        self.killed.add(node)
        self.target.kill(node)
        self.target.restart(node)
        self.killed.discard(node)

    def _set_clock_right(self, node: str) -> None:
        self.target.step_clock(node, 0.0)
        self._restart_now(node)

    def restart_exited(self) -> None:
        """A node that exited by itself during a fault (a broker that stops on a full disk) is recorded and
        started again, as a supervisor would; the run goes on."""
        for name, status in self.target.exited_nodes():
            if name in self.killed or name in self.powered_off:
                continue
            self.recorder.record("nemesis", "nemesis", fault="exited", action="restart",
                                 detail=f"{name} exited with status {status}")
            self.target.restart(name)

    def heal_all(self) -> None:
        """Undo everything still in force — the network, the remote store, paused nodes, full disks, and
        killed nodes last (started again into a healed cluster); keeps going past a failure and raises the
        first one at the end."""
        if self.network_dirty:
            self.network_dirty = not self._undo(self.target.network.heal)
        if self.remote_failing:
            self.remote_failing = not self._undo(self.target.remote_store.heal)
        if self.mirror_killed:
            self.mirror_killed = not self._undo(self.target.mirror.start_process)
        # By name: a target that takes no faults (BootstrapTarget) has none of these handles.
        undos = ((self.paused, "resume"), (self.full_disks, "empty_disk"), (self.killed, "restart"),
                 (self.powered_off, "restart"))
        for pending, undo in undos:
            for name in sorted(pending):
                if self._undo(getattr(self.target, undo), name):
                    pending.discard(name)
        for name in sorted(self.skewed):  # last: into a cluster whose other faults are healed
            if self._undo(self._set_clock_right, name):
                self.skewed.discard(name)
        first = self._first_failure
        self._first_failure = None
        if first is not None:
            raise first

    def _undo(self, undo, *args) -> bool:
        try:
            undo(*args)
        except (OSError, RuntimeError) as exc:
            self._first_failure = self._first_failure or exc
            return False
        return True

    def _resolve(self, role: str, until: float) -> str | None:
        """The node a role names now ("leader:TOPIC:P": that partition's leader), asked again every
        RESOLVE_INTERVAL_S until `until` (time.monotonic()) while there is none; None then."""
        if not role.startswith("leader:"):
            return role
        _, topic, partition = role.split(":")
        while True:
            md = ClusterMetadata(self.target.bootstrap, request_timeout_ms=RESOLVE_TIMEOUT_MS)
            try:
                leader = md.refresh([topic]).topics[topic][int(partition)].leader
                if leader >= 0:
                    return f"broker-{leader}"
                log.info("no leader for %s yet", role)
            except (KanalError, grpc.RpcError, KeyError, IndexError) as exc:
                log.info("no leader for %s: %s", role, exc)
            finally:
                md.close()
            if time.monotonic() + RESOLVE_INTERVAL_S > until:
                return None
            time.sleep(RESOLVE_INTERVAL_S)  # polling the cluster for a leader, bounded by `until`
