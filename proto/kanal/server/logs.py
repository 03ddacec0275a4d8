"""Log lines of a server process (`kanal controller`, `kanal broker`) on stdout, where a container runtime
collects them.

Two formats (`--log-format`):
- `text`: `2025-01-31 12:00:00,123 broker-1 MainThread INFO kanal.broker.lifecycle: registered ...`
- `json`: one JSON object per line, keys always present in this order:
  `{"ts": "2025-01-31T12:00:00.123Z", "level": "INFO", "node": "broker-1", "logger": "kanal.broker.lifecycle",
    "thread": "MainThread", "message": "registered ..."}`, plus `"exc"` (the formatted traceback) when the
  record carries an exception. `ts` is UTC with milliseconds; `message` is the formatted message.

Start-up errors (bad configuration) are not log lines: they are one line on stderr before logging starts.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def __init__(self, node: str) -> None:
        super().__init__()
        self._node = node

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {"ts": f"{ts}.{int(record.msecs):03d}Z", "level": record.levelname, "node": self._node,
                "logger": record.name, "thread": record.threadName, "message": record.getMessage()}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def setup_logging(log_format: str, level: str, node: str) -> None:
    """Send every log record of this process to stdout in `log_format`, replacing earlier handlers."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stdout)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(node))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {node} %(threadName)s %(levelname)s %(name)s: %(message)s")
        )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
