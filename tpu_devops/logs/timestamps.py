"""The timestamp that starts a plain-text log line, as an RFC 3339 string (`leading_timestamp`).

Stamps understood (parsed with python-dateutil, not by hand):

- RFC 3339 / ISO 8601: ``docker logs --timestamps`` (``2026-11-30T21:04:05.123456789Z``), rsyslog's
  high-precision format and ``journalctl -o short-iso`` (``2026-11-30T21:04:05+0000``, offset without a
  colon);
- RFC 5424 syslog: ``<165>1 2026-11-30T21:04:05.003Z host app 123 ID47 - message``;
- BSD syslog (RFC 3164), ``/var/log/syslog`` and ``journalctl`` short output: ``Nov 30 21:04:05 host
  program[123]: message``, day padded with a space (``Nov  3``), optionally behind a ``<PRI>``.

A BSD syslog stamp has no year and no zone. The year is that of the most recent occurrence of the
month, day and time at or before ``reference`` (the file's modification time: a line cannot be written
after its file last was), so a ``Dec 31`` line read on ``Jan 2`` is last year's; a ``Feb 29`` takes
the most recent leap year. The zone is taken as UTC (Google's guest images keep the system clock in
UTC). Sources: RFC 3164 §4.1.2, RFC 5424 §6, dateutil.readthedocs.io (parser.parse ``default``,
parser.isoparse).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from dateutil import parser as dateparser

_ISO = re.compile(
    r"^(?:<\d{1,3}>1 )?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d))(?:\s|$)"
)
_BSD = re.compile(
    r"^(?:<\d{1,3}>)?((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?:\s|$)"
)
_YEARS_BACK = 8  # enough to reach a leap year for "Feb 29"


def _rfc3339(moment: datetime) -> str:
    text = moment.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def _bsd(stamp: str, reference: datetime) -> datetime | None:
    for year in range(reference.year, reference.year - _YEARS_BACK, -1):
        try:
            moment = dateparser.parse(stamp, default=datetime(year, 1, 1, tzinfo=UTC))
        except (ValueError, OverflowError):  # Feb 29 in a common year: try the year before
            continue
        if moment <= reference:
            return moment
    return None


def leading_timestamp(line: str, reference: datetime) -> tuple[str, str] | None:
    """(RFC 3339 UTC stamp, the rest of the line) when ``line`` starts with a stamp listed in the module
    docstring, else None. ``reference``: an aware datetime no line can be later than (the file's mtime),
    used to give a BSD syslog stamp its year. Never raises."""
    for pattern in (_ISO, _BSD):
        m = pattern.match(line)
        if not m:
            continue
        stamp = m.group(1)
        try:
            moment = (
                dateparser.isoparse(stamp.replace(",", ".")) if pattern is _ISO else _bsd(stamp, reference)
            )
        except (ValueError, OverflowError):
            moment = None
        if moment is None:
            return None
        rest = line[m.end() :]
        if pattern is _ISO and stamp.endswith("Z"):
            # already UTC RFC 3339: kept as given (Docker's nanoseconds do not fit a datetime)
            return stamp.replace(",", "."), rest
        return _rfc3339(moment), rest
    return None
