"""kanal.raft: the controller quorum — pysyncobj wired safely, the metadata log on disk, the active
controller (decisions, fencing, failover) and the Controller gRPC service. See README.md in this folder.

Nothing is imported here, so `kanal controller --help` stays fast; import the modules you need.
"""
