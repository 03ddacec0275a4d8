"""kanal chaos: a Jepsen-style fault runner (nemeses, workloads, a recorded history) and its checker."""
