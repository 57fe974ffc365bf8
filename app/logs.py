"""Structured one-line JSON logs. Access lines carry method, path, status and timing only: never
headers or bodies, so keys, passwords and credentials cannot reach a log line."""

from __future__ import annotations

import logging
import sys
import time

import orjson
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        return orjson.dumps(entry).decode()


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class AccessLogger(AbstractAccessLogger):
    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info(
            "request",
            extra={"fields": {
                "method": request.method, "path": request.path, "status": response.status,
                "ms": round(time * 1000, 2), "remote": request.remote,
            }},
        )
