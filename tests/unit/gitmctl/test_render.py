"""Times in gitmctl's tables carry their date unless they are today's."""

from __future__ import annotations

import time

from gitmctl.render import clock_h


def test_a_time_from_another_day_shows_its_date() -> None:
    now = time.time()
    today = clock_h(int(now * 1e9), now)
    assert len(today) == len("12:34:56.789") and today.count(":") == 2
    older = clock_h(int((now - 3 * 86400) * 1e9), now)
    assert older.startswith(time.strftime("%Y-%m-%d ", time.localtime(now - 3 * 86400)))
