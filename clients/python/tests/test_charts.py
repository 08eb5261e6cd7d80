"""The console's charts as geometry (no server needed)."""

from __future__ import annotations

from pg_distlock.console.charts import MIN_BAR_PX, throughput


def test_a_rare_death_beside_many_completions_is_visible() -> None:
    chart = throughput([{"minutes_ago": 0, "completed": 6000, "died": 1}])
    died = [r for r in chart.rects if r.kind == "died"]
    assert len(died) == 1 and died[0].height >= MIN_BAR_PX >= 4, died
    completed = [r for r in chart.rects if r.kind == "completed"]
    assert died[0].y + died[0].height <= completed[0].y + 0.001, "stacked on top, not over it"
    assert "1 died" in died[0].title
