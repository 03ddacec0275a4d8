"""kanal: a Kafka-style event streaming platform in Python.

The distribution's code lives in the repository's top-level folders, each importable as a subpackage:
kanal.v1 (proto/, the generated contract), kanal.metadata, kanal.raft, kanal.broker, kanal.clients,
kanal.spark and kanal.deploy. This file only makes `kanal` a package.
"""

__version__ = "0.1.0"
