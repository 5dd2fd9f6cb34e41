"""Logging to stdout in a form journald keeps: syslog level prefixes under systemd, timestamps otherwise."""

from __future__ import annotations

import logging
import os
import sys

_SYSLOG = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        prefix = f"<{_SYSLOG.get(record.levelno, 6)}>"
        return "\n".join(prefix + line for line in text.splitlines())


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))
