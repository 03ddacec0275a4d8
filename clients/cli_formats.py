"""What the client commands read from and write to the command line: times as Kafka's tools take them, and
kcat's record format strings. Pure functions; the commands in cli.py call them.

Times (`consume --from-timestamp`, `groups reset-offsets --to-datetime`): ISO 8601 as kafka-consumer-groups
takes it (`2026-11-27T10:00:00`, `2026-11-27T10:00:00.250Z`, `2026-11-27T10:00:00+01:00`; without a zone
the local one, as Kafka does), or milliseconds since the epoch (all digits). Durations (`--by-duration`):
ISO 8601's `PnDTnHnMnS`, as Kafka's, e.g. `PT15M`, `P1DT12H`.

Record formats (`consume --format`, kcat's `-f`): `%t` topic, `%p` partition, `%o` offset, `%T` timestamp
(ms), `%k` key, `%s` value, `%h` headers (`k=v` joined by `,`), `%K` / `%S` key / value length in bytes
(-1 for null), `%%` a percent sign, `\\n` `\\t` `\\\\` escapes. A null key or value prints as `null`, bytes
that are not UTF-8 are backslash-escaped (kanal.commands.record_text), as in the console consumer's text
output.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from kanal.commands.record_text import as_text
from kanal.v1.error import ErrorCode, KanalError

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 date-time or of a number of milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise KanalError(
            ErrorCode.INVALID_TIMESTAMP,
            f"{text!r} is neither ISO 8601 (2026-11-27T10:00:00[.sss][Z|+hh:mm]) nor milliseconds "
            "since the epoch",
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone, as Kafka's tools read a date-time without one
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO 8601 duration PnDTnHnMnS (at least one part; no years or months, as Kafka)."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise KanalError(
            ErrorCode.INVALID_REQUEST, f"{text!r} is not an ISO 8601 duration such as PT15M or P1DT2H"
        )
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def _length(data: bytes | None) -> str:
    return "-1" if data is None else str(len(data))


_FIELDS: dict[str, Callable[[Any], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "T": lambda r: str(r.timestamp_ms),
    "k": lambda r: as_text(r.key),
    "s": lambda r: as_text(r.value),
    "h": lambda r: ",".join(f"{k}={as_text(v)}" for k, v in r.headers),
    "K": lambda r: _length(r.key),
    "S": lambda r: _length(r.value),
}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def compile_format(fmt: str) -> Callable[[Any], str]:
    """A function that renders a record (topic, partition, offset, timestamp_ms, key, value, headers) by
    the kcat-style format `fmt`; INVALID_REQUEST for an unknown `%x` or a lone trailing `%` or `\\`."""
    parts: list[str | Callable[[Any], str]] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch in "%\\":
            if i + 1 == len(fmt):
                raise KanalError(ErrorCode.INVALID_REQUEST, f"--format ends with a lone {ch!r}")
            nxt = fmt[i + 1]
            if ch == "%" and nxt == "%":
                parts.append("%")
            elif ch == "%":
                if nxt not in _FIELDS:
                    raise KanalError(ErrorCode.INVALID_REQUEST,
                                     f"--format: unknown field %{nxt} (known: %t %p %o %T %k %s %h %K %S %%)")
                parts.append(_FIELDS[nxt])
            else:
                parts.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            parts.append(ch)
            i += 1
    return lambda record: "".join(p if isinstance(p, str) else p(record) for p in parts)
