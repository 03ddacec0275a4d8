"""How `kanal consume` prints records (the subprocess tests in tests/cluster/test_cli.py drive the rest)."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

from kanal.clients.cli import _print_record
from kanal.clients.consumer import ConsumerRecord


def record(key, value, headers=()):
    return ConsumerRecord("t", 0, 7, 1_700_000_000_000, key, value, list(headers), 0)


def printed(capsys, r, **args) -> str:
    _print_record(SimpleNamespace(output=args.get("output", "text"), print_key=args.get("print_key", False),
                                  key_separator=args.get("key_separator")), r)
    return capsys.readouterr().out


def test_text_prints_null_keys_and_tombstones_as_kafka_does(capsys):
    assert printed(capsys, record(None, None)) == "null\n"
    assert printed(capsys, record(None, b"v"), print_key=True) == "null\tv\n"
    assert printed(capsys, record(b"k", None), print_key=True, key_separator=":") == "k:null\n"
    assert printed(capsys, record(b"k", b""), print_key=True) == "k\t\n"  # empty is not null


def test_json_lines_keep_null_apart_from_empty_and_base64_bytes_that_are_not_utf8(capsys):
    line = json.loads(printed(capsys, record(b"\x80k", None, [("h", b"\xc3\x28"), ("n", None), ("h", b"")]),
                              output="json"))
    assert line == {"topic": "t", "partition": 0, "offset": 7, "timestamp": 1_700_000_000_000,
                    "key": base64.b64encode(b"\x80k").decode(), "key_encoding": "base64", "value": None,
                    "headers": [{"key": "h", "value": base64.b64encode(b"\xc3\x28").decode(),
                                 "value_encoding": "base64"},
                                {"key": "n", "value": None}, {"key": "h", "value": ""}]}
    assert (
        json.loads(printed(capsys, record(rb"\x80k", b""), output="json"))["key"] == "\\x80k"
    )  # text stays text
    assert json.loads(printed(capsys, record(None, "é".encode()), output="json"))["value"] == "é"
