"""SourceOptions: the options of kanal's Spark data sources, typed and validated.

Spark hands a data source its options as a case-insensitive map of strings; unknown keys are refused here
(a typo such as `mdoe` must not silently read with defaults). Keys are compared lower-cased.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from kanal.broker.storage.remote_storage import open_remote_storage
from kanal.security.channel_security import ClientSecurity
from kanal.spark import decoding_options
from kanal.spark.decoding_options import DecodingOptions
from kanal.spark.segment_files import RemoteStore
from kanal.spark.transactions import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from kanal.v1.error import KanalError

MODES = ("PERMISSIVE", "FAILFAST")
# A secured cluster read through `bootstrap` (kanal.security.channel_security): option -> ClientSecurity
# field.
# The password travels in the query's options as every option does (Spark shows them in plans): give
# a user for whom that is acceptable, or a client certificate.
SECURITY_OPTIONS = {"tls.ca.file": "ca_file", "tls.cert.file": "cert_file", "tls.key.file": "key_file",
                    "tls.server.name": "server_name", "user": "user", "password": "password"}
_KNOWN = {"path", "paths", "bootstrap", "topics", "includeinternal", "mode", "bytesperpartition",
          "minpartitions", "isolationlevel", "remotestorage", "remotestorageendpoint", *SECURITY_OPTIONS,
          *decoding_options.KNOWN}


def security_options(security: ClientSecurity | None) -> dict[str, str]:
    """The data source options that carry `security` (none for plaintext)."""
    if security is None:
        return {}
    return {option: str(getattr(security, name)) for option, name in SECURITY_OPTIONS.items()
            if getattr(security, name) is not None}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    path: str = ""
    bootstrap: str = ""
    topics: frozenset[str] | None = None
    include_internal: bool = False
    # PERMISSIVE: damage becomes a `_corrupt` row; FAILFAST: the scan stops at the first damage.
    mode: str = "PERMISSIVE"
    bytes_per_partition: int = 0  # 0: the default (segment_files.GROUP_BYTES_MAX_DEFAULT)
    security: ClientSecurity | None = None  # TLS and credentials for `bootstrap` (None: plaintext)
    # read_uncommitted (Kafka's default) or read_committed: spark/transactions.py
    isolation_level: str = READ_UNCOMMITTED
    min_partitions: int = 0  # 0: the default (partitions_min)
    # Tiered storage: the cluster's remote storage URL (s3://bucket/prefix, file:///dir; "" none) and an
    # S3-compatible endpoint for it (copy_plan.py reads the remote segments before the local files).
    remote_storage: str = ""
    remote_storage_endpoint: str = ""
    # kanal-log: keys and values decoded through the schema registry (decoding_options.py); None: bytes.
    decoding: DecodingOptions | None = None

    @property
    def remote_store(self) -> RemoteStore | None:
        return RemoteStore(self.remote_storage, self.remote_storage_endpoint) if self.remote_storage else None

    @property
    def partitions_min(self) -> int:
        """The least number of Spark partitions a read from files is cut into (by size,
        log_source.plan_groups): `minPartitions` (the Kafka connector's name); by default the planning
        machine's CPU count, so a log smaller than bytesPerPartition still keeps every core of local[N]
        busy; 1 when bytesPerPartition is given without minPartitions (the user sized the tasks)."""
        if self.min_partitions:
            return self.min_partitions
        return 1 if self.bytes_per_partition else (os.cpu_count() or 1)

    @property
    def fail_fast(self) -> bool:
        return self.mode == "FAILFAST"

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    @classmethod
    def parse(cls, options: Mapping[str, str], *, files_only: bool = False) -> SourceOptions:
        given = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(given) - _KNOWN)
        if unknown:
            raise ValueError(f"unknown options {unknown}; known: {sorted(_KNOWN)}")
        mode = given.get("mode", "PERMISSIVE").upper()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} (rows are never dropped silently), got {mode!r}")
        path = given.get("path", "")
        bootstrap = given.get("bootstrap", "")
        if files_only and bootstrap:
            raise ValueError("this source reads files only: give a path, not a bootstrap")
        if files_only and "isolationlevel" in given:
            raise ValueError("isolationLevel applies to partition data; the metadata log has no transactions")
        if not path and not bootstrap:
            raise ValueError("give a data directory to load() or the option bootstrap=host:port")
        topics = (
            frozenset(t.strip() for t in given["topics"].split(",") if t.strip())
            if "topics" in given
            else None
        )
        internal = given.get("includeinternal", "false").lower()
        if internal not in ("true", "false"):
            raise ValueError(f"includeInternal must be true or false, got {internal!r}")
        try:
            per_partition = int(given.get("bytesperpartition", "0"))
        except ValueError:
            raise ValueError(
                f"bytesPerPartition must be an integer, got {given['bytesperpartition']!r}"
            ) from None
        if per_partition < 0:
            raise ValueError(f"bytesPerPartition must be >= 0, got {per_partition}")
        try:
            min_partitions = int(given.get("minpartitions", "0"))
        except ValueError:
            raise ValueError(f"minPartitions must be an integer, got {given['minpartitions']!r}") from None
        if min_partitions < 0:
            raise ValueError(f"minPartitions must be >= 1, got {min_partitions}")
        fields = {name: given[option] for option, name in SECURITY_OPTIONS.items() if option in given}
        if fields and not bootstrap:
            raise ValueError(f"{sorted(o for o in SECURITY_OPTIONS if o in given)} apply to a bootstrap only")
        try:
            security = ClientSecurity(**fields) if fields else None
        except KanalError as exc:
            raise ValueError(exc.message) from None
        isolation = given.get("isolationlevel", READ_UNCOMMITTED).lower()
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"isolationLevel must be one of {ISOLATION_LEVELS}, got {isolation!r}")
        remote = given.get("remotestorage", "")
        endpoint = given.get("remotestorageendpoint", "")
        if endpoint and not remote:
            raise ValueError("remoteStorageEndpoint applies to a remoteStorage only")
        if remote and (bootstrap or files_only):
            raise ValueError("remoteStorage applies to a read of partition logs from files (a path) only")
        if remote:
            try:
                open_remote_storage(remote, endpoint=endpoint)  # the URL's checks, on the driver
            except KanalError as exc:
                raise ValueError(exc.message) from None
        decoding = DecodingOptions.parse(given, from_files=not bootstrap)
        if decoding is not None and files_only:
            raise ValueError("valueFormat and keyFormat apply to partition data (kanal-log)")
        return cls(path, bootstrap, topics, internal == "true", mode, per_partition, security, isolation,
                   min_partitions, remote, endpoint, decoding)
