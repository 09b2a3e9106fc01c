"""The daemon's log lines: text for people, JSON lines for log shippers.

One line per event: the text format folds a message's own line breaks and
an exception's traceback into the line (as ``\\n``), so a shipper reading
lines never splits an event; JSON puts them in fields. Each line names what
it concerns (partition, group, client) in its message; values given as
``extra={"topic": ..., "partition": ..., "group": ..., "client_id": ...}``
become fields of their own in JSON.
"""

from __future__ import annotations

import json
import logging
import sys
import time

FORMATS = ("text", "json")
# LogRecord attributes that are not extra fields.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Extra fields carried into JSON lines.
EXTRA_FIELDS = ("topic", "partition", "group", "client_id", "member_id", "peer")


def _iso(created: float) -> str:
    t = time.gmtime(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in EXTRA_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Configures the root logger for the daemon: one stream handler on stderr."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
    # Exists from the start, so BROKER_LOGGER describes and alters it.
    logging.getLogger("kbroker.request")
