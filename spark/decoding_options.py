"""DecodingOptions: `kanal-log`'s options for decoding keys and values through the schema registry.

| option | what |
|---|---|
| `valueFormat` / `keyFormat` | `avro`: the value (key) is Confluent's framing (magic byte 0, the schema id, the Avro datum) and becomes a typed column (value_decoding.py); `binary` (the default): the bytes |
| `valueSubject` / `keySubject` | the subject whose latest live version is the reader schema; by default `<topic>-value` / `<topic>-key` (Confluent's TopicNameStrategy) of the one topic `topics` names |
| `valueSchemaId` / `keySchemaId` | the reader schema by id instead (not with the subject option) |
| `schemaRegistry` | where schemas come from when they are not read from the metadata log: the registry's REST URL (`http(s)://host:port`, several comma-separated, tried in order); required with `bootstrap` |
| `schemaRegistry.user`, `schemaRegistry.password` | HTTP basic credentials for it (a kanal registry takes them over TLS only) |
| `schemaRegistry.tls.ca.file` | the CA that signed an `https` registry's certificate (else the system's) |

A read from files (a path) without `schemaRegistry` takes the schemas from the controllers' metadata log
under the path (schema_lookup.py): the registry's own state at the log's committed end, no network.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FORMATS = ("binary", "avro")
SIDES = ("key", "value")
REGISTRY_OPTIONS = ("schemaregistry", "schemaregistry.user", "schemaregistry.password",
                    "schemaregistry.tls.ca.file")
# Lower-cased, as SourceOptions compares keys.
KNOWN = frozenset({*(f"{side}{what}" for side in SIDES for what in ("format", "subject", "schemaid")),
                   *REGISTRY_OPTIONS})
SCHEMA_ID_MAX = (1 << 31) - 1  # registry ids are positive int32s


@dataclass(frozen=True, slots=True)
class RegistryEndpoint:
    """A schema registry's REST API and how to reach it (registry_client.py)."""

    urls: tuple[str, ...]
    user: str = ""
    password: str = ""
    ca_file: str = ""

    def __repr__(self) -> str:  # never the password: a repr lands in logs and plans
        return f"<RegistryEndpoint {','.join(self.urls)}{' user=' + self.user if self.user else ''}>"


@dataclass(frozen=True, slots=True)
class SideOptions:
    """How one side (key or value) is decoded: where its reader schema is (a subject's latest live version,
    or an id)."""

    side: str
    subject: str = ""  # "" with schema_id, or for the default <topic>-<side>
    schema_id: int = 0

    def subject_for(self, topics: frozenset[str] | None) -> str:
        """The subject of the reader schema: the option's, else `<topic>-<side>` of the one topic read."""
        if self.subject:
            return self.subject
        if topics is None or len(topics) != 1:
            raise ValueError(
                f"{self.side}Format=avro reads with one reader schema: name one topic in `topics` (its "
                f"subject is <topic>-{self.side}), or give {self.side}Subject or {self.side}SchemaId")
        return f"{next(iter(topics))}-{self.side}"


@dataclass(frozen=True, slots=True)
class DecodingOptions:
    """The decoded sides (at least one) and the registry to ask, if any (None: the metadata log)."""

    sides: tuple[SideOptions, ...]
    registry: RegistryEndpoint | None = None

    def side(self, name: str) -> SideOptions | None:
        return next((s for s in self.sides if s.side == name), None)

    @classmethod
    def parse(cls, given: Mapping[str, str], *, from_files: bool) -> DecodingOptions | None:
        """From the lower-cased options; None when neither side is decoded. ValueError for a bad value, an
        option that needs another, or a read through brokers without a registry."""
        sides = []
        for side in SIDES:
            fmt = given.get(f"{side}format", "binary").lower()
            if fmt not in FORMATS:
                raise ValueError(f"{side}Format must be one of {FORMATS}, got {fmt!r}")
            subject = given.get(f"{side}subject", "")
            schema_id = _schema_id(side, given.get(f"{side}schemaid", ""))
            if fmt == "binary":
                if subject or schema_id:
                    raise ValueError(f"{side}Subject and {side}SchemaId apply to {side}Format=avro only")
                continue
            if subject and schema_id:
                raise ValueError(f"give {side}Subject or {side}SchemaId, not both")
            sides.append(SideOptions(side, subject, schema_id))
        registry = _registry(given)
        if not sides:
            if registry is not None:
                raise ValueError("schemaRegistry applies to valueFormat=avro or keyFormat=avro only")
            return None
        if registry is None and not from_files:
            raise ValueError("a read through brokers (bootstrap) decodes with schemas from a registry: give "
                             "schemaRegistry=http(s)://host:port")
        return cls(tuple(sides), registry)


def _schema_id(side: str, text: str) -> int:
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{side}SchemaId must be an integer, got {text!r}") from None
    if not 0 < value <= SCHEMA_ID_MAX:
        raise ValueError(f"{side}SchemaId must be in 1..{SCHEMA_ID_MAX}, got {value}")
    return value


def _registry(given: Mapping[str, str]) -> RegistryEndpoint | None:
    url = given.get("schemaregistry", "")
    extras = sorted(k for k in REGISTRY_OPTIONS[1:] if k in given)
    if not url:
        if extras:
            raise ValueError(f"{extras} apply to a schemaRegistry only")
        return None
    urls = tuple(u.strip().rstrip("/") for u in url.split(",") if u.strip())
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if not urls or bad:
        raise ValueError(f"schemaRegistry must be http(s)://host:port[,...], got {url!r}")
    user = given.get("schemaregistry.user", "")
    password = given.get("schemaregistry.password", "")
    if bool(user) != bool(password):
        raise ValueError("schemaRegistry.user and schemaRegistry.password go together")
    return RegistryEndpoint(urls, user, password, given.get("schemaregistry.tls.ca.file", ""))
