"""matplotlib for the benchmarks' PNGs, file-only (``pip install -e '.[bench]'``)."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend: no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nwrote {path}")
