"""Record bytes shown to people and written as JSON, shared by `kanal consume` and `kanal dump-log`.

Text output decodes UTF-8 and shows other bytes as backslash escapes (readable, not reversible). JSON
output is lossless: a value that is UTF-8 is its text; any other is base64 with `<field>_encoding:
"base64"` beside it (JSON has no bytes, and escapes could not be told apart from text holding
backslashes). A null key or value (a tombstone) is JSON null, and "null" in text, as Kafka's console
consumer prints it.
"""

from __future__ import annotations

import base64


def as_text(value: bytes | None) -> str:
    """For people: "null" for None, bytes that are not UTF-8 as backslash escapes."""
    return "null" if value is None else value.decode("utf-8", errors="backslashreplace")


def put_bytes(out: dict, field: str, value: bytes | None) -> None:
    """out[field] = value for JSON, losslessly (see the module docstring)."""
    if value is None:
        out[field] = None
        return
    try:
        out[field] = value.decode("utf-8")
    except UnicodeDecodeError:
        out[field] = base64.b64encode(value).decode("ascii")
        out[field + "_encoding"] = "base64"
