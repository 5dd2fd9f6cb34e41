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


def test_a_table_cell_is_one_line_of_at_most_max_cell_characters() -> None:
    """Hardening issue, item 11: tables 124-228 columns wide (a 200-character job name, a long
    command, a newline in a name). A cell is one line of at most MAX_CELL characters, ending in "…"
    when cut; --json keeps the whole value."""
    import io

    from gitmctl.render import MAX_CELL, table

    out = io.StringIO()

    table(("ID", "NAME", "COMMAND"), [("ab12", "n" * 200, "python train.py\n--epochs 3")], out)
    _, row = out.getvalue().splitlines()
    assert len(row) <= 4 + 2 + MAX_CELL + 2 + MAX_CELL and "n" * (MAX_CELL - 1) + "…" in row
    assert row.endswith("python train.py --epochs 3") and len(out.getvalue().splitlines()) == 2


def test_a_distributed_jobs_processes_in_rank_order() -> None:
    from gitmctl.commands.job import process_table
    from gitmd.api.pb import pb

    j = pb.Job(id="j")
    j.processes.add(pid=30, rank=1, world_size=2, gpus=[1], alive=True, status="idle")
    j.processes.add(pid=40, rank=0, local_rank=0, world_size=2, gpus=[0], alive=True, status="idle")
    j.processes.add(pid=20, alive=True, status="idle")  # torchrun's own process: no rank, no GPU
    head, rows = process_table(j)
    assert head[:3] == ("PID", "RANK", "GPUS")
    assert [r[:3] for r in rows] == [("20", "-", "-"), ("40", "0/2 (local 0)", "0"), ("30", "1/2", "1")]
    alone = pb.Job(id="k")
    alone.processes.add(pid=5, gpus=[0], alive=True)
    head, rows = process_table(alone)
    assert "RANK" not in head and rows[0][:2] == ("5", "0")
