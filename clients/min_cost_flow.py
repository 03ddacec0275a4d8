"""Min-cost maximum flow over small integer networks, pure Python (the balance planner's solver).

Method: successive shortest paths with Johnson potentials (primal-dual). Each phase runs Dijkstra on
reduced costs from the source, moves the potentials so every shortest path has reduced cost 0, then pushes
a blocking flow (Dinic: BFS levels, current-arc DFS) through the edges of reduced cost 0 only. With the
planner's costs (0, 1 and a few large penalties) the number of distinct path lengths, and so of phases,
stays small; a phase pushes many units at once, which is what keeps thousands of partitions fast.

Edge costs must be non-negative (the potentials start at 0). Edge i's reverse is i ^ 1.
"""

from __future__ import annotations

import heapq


class FlowNetwork:
    """A directed network of `node_count` nodes; `add_edge` returns the edge's index for `flow_on`."""

    def __init__(self, node_count: int) -> None:
        self.adjacent: list[list[int]] = [[] for _ in range(node_count)]
        self.head: list[int] = []
        self.capacity: list[int] = []
        self.cost: list[int] = []
        self._initial: list[int] = []

    def add_node(self) -> int:
        self.adjacent.append([])
        return len(self.adjacent) - 1

    def add_edge(self, source: int, target: int, capacity: int, cost: int) -> int:
        if capacity < 0 or cost < 0:
            raise ValueError("capacities and costs must be non-negative")
        edge = len(self.head)
        self.head += [target, source]
        self.capacity += [capacity, 0]
        self.cost += [cost, -cost]
        self._initial += [capacity, 0]
        self.adjacent[source].append(edge)
        self.adjacent[target].append(edge + 1)
        return edge

    def flow_on(self, edge: int) -> int:
        return self._initial[edge] - self.capacity[edge]

    def min_cost_max_flow(self, source: int, sink: int) -> tuple[int, int]:
        """Push the maximum flow from `source` to `sink` at the least total cost; returns (flow, cost)."""
        n = len(self.adjacent)
        potential = [0] * n
        flow = cost = 0
        while True:
            dist = self._dijkstra(source, potential)
            reach = dist[sink]
            if reach is None:
                return flow, cost
            for v in range(n):
                d = dist[v]
                potential[v] += reach if d is None or d > reach else d
            pushed = self._blocking_flows(source, sink, potential)
            flow += pushed
            cost += pushed * (potential[sink] - potential[source])

    def _dijkstra(self, source: int, potential: list[int]) -> list[int | None]:
        dist: list[int | None] = [None] * len(self.adjacent)
        dist[source] = 0
        heap = [(0, source)]
        head, capacity, cost, adjacent = self.head, self.capacity, self.cost, self.adjacent
        while heap:
            d, u = heapq.heappop(heap)
            if d != dist[u]:
                continue
            base = d + potential[u]
            for e in adjacent[u]:
                if capacity[e] > 0:
                    v = head[e]
                    nd = base + cost[e] - potential[v]
                    old = dist[v]
                    if old is None or nd < old:
                        dist[v] = nd
                        heapq.heappush(heap, (nd, v))
        return dist

    def _blocking_flows(self, source: int, sink: int, potential: list[int]) -> int:
        """Max flow through the admissible edges (residual, reduced cost 0) by Dinic's phases."""
        head, capacity, cost, adjacent = self.head, self.capacity, self.cost, self.adjacent
        total = 0
        while True:
            level = [-1] * len(adjacent)
            level[source] = 0
            frontier = [source]
            while frontier and level[sink] < 0:
                following = []
                for u in frontier:
                    for e in adjacent[u]:
                        v = head[e]
                        if capacity[e] > 0 and level[v] < 0 and cost[e] + potential[u] == potential[v]:
                            level[v] = level[u] + 1
                            following.append(v)
                frontier = following
            if level[sink] < 0:
                return total
            arc = [0] * len(adjacent)
            while True:
                pushed = self._augment(source, sink, level, arc, potential)
                if not pushed:
                    break
                total += pushed

    def _augment(self, source: int, sink: int, level: list[int], arc: list[int], potential: list[int]) -> int:
        """One augmenting path along levels (iterative DFS with current arcs); 0 when none is left."""
        head, capacity, cost, adjacent = self.head, self.capacity, self.cost, self.adjacent
        path: list[int] = []
        u = source
        while u != sink:
            edges = adjacent[u]
            i = arc[u]
            while i < len(edges):
                e = edges[i]
                v = head[e]
                if capacity[e] > 0 and level[v] == level[u] + 1 and cost[e] + potential[u] == potential[v]:
                    break
                i += 1
            arc[u] = i
            if i < len(edges):
                path.append(edges[i])
                u = head[edges[i]]
                continue
            if u == source:
                return 0
            level[u] = -1  # a dead end for the rest of this phase
            back = path.pop()
            u = head[back ^ 1]
            arc[u] += 1
        pushed = min(capacity[e] for e in path)
        for e in path:
            capacity[e] -= pushed
            capacity[e ^ 1] += pushed
        return pushed
