"""Draws jobs/s against consumer count, pg_distlock vs the hand-written
queue, from the CSV benches/queue.sh writes.

    python3 benches/plot_queue.py queue.csv benches/queue_throughput.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path: str, png_path: str, subtitle: str) -> None:
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    consumers = [int(r["consumers"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.plot(consumers, [float(r["pg_distlock"]) for r in rows], "o-", label="pg_distlock: consume_task + complete_task")
    ax.plot(consumers, [float(r["hand_written"]) for r in rows], "s--", label="hand-written SKIP LOCKED UPDATE pair")
    ax.set_xscale("log", base=2)
    ax.set_xticks(consumers, [str(c) for c in consumers])
    ax.set_xlabel("consumers (one job per transaction, consume and complete each committed)")
    ax.set_ylabel("jobs per second")
    ax.set_ylim(bottom=0)
    ax.set_title("Job queue throughput\n" + subtitle, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
