"""Draws jobs/s and dead tuples per window for each system, the held
snapshot shaded, from the CSV benches/queue_pressure.sh writes.

    python3 benches/plot_pressure.py pressure_windows.csv pressure.png [SUBTITLE]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path: str, png_path: str, subtitle: str) -> None:
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] != "warmup"]
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, (rate, dead) = plt.subplots(2, 1, figsize=(8, 6.4), dpi=120, sharex=True)
    held_span = None
    for system in systems:
        rs = [r for r in rows if r["system"] == system]
        # Time from the start of the unpressured phase.
        t0 = float(rs[0]["t_end_s"]) - (float(rs[1]["t_end_s"]) - float(rs[0]["t_end_s"]) if len(rs) > 1 else 0)
        t = [float(r["t_end_s"]) - t0 for r in rs]
        rate.plot(t, [float(r["jobs_per_s"]) for r in rs], "o-", ms=3, label=system)
        dead.plot(t, [float(r["dead_tuples"]) for r in rs], "o-", ms=3, label=system)
        held = [ti for ti, r in zip(t, rs) if r["phase"] == "held"]
        if held and held_span is None:
            step = t[1] - t[0] if len(t) > 1 else 0
            held_span = (held[0] - step, held[-1])
    for ax in (rate, dead):
        if held_span:
            ax.axvspan(*held_span, color="tab:red", alpha=0.08, label="_held")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if held_span:
        rate.text(held_span[0], 0, " snapshot held", color="tab:red", fontsize=8, va="bottom")
    rate.set_ylabel("jobs per second (per window)")
    dead.set_ylabel("dead tuples in the system's schema")
    dead.set_xlabel("seconds from the start of the unpressured phase")
    rate.legend(loc="upper right", fontsize=8)
    rate.set_title("Phase A under a held REPEATABLE READ snapshot\n" + subtitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
