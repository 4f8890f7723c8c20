#!/usr/bin/env python3
"""Plots benchmark results as PNG: `ferry bench --json` output, or the --json of
bench/peers_bench.py (told apart by their content).

  ferry bench   one panel per input file: GB/s of each ferry route against the ceilings
                measured in the same run (parallel pread, pinned host -> device copy, pwrite),
                drawn as dashed lines; against the thread count when the sweep has several
                (one line per route, task size and staging configuration), else as bars
  peers_bench   one panel per file and cache state (raw, .npy, safetensors; hot, cold): GB/s of
                ferry and each peer (at its defaults and at its best) with the ceiling of that
                state, a panel of every configuration of each peer's sweep, then a panel of
                durable writes (mean, with the min-max of the rounds)

  build/tools/ferry bench --size 8G --threads 4,8,16 --json > hot.json
  python3 bench/plot_bench.py hot.json [cold.json ...] -o bench.png
  python3 bench/plot_bench.py peers.json -o peers.png

matplotlib is optional for ferry; without it this script says so and exits with status 2.
"""

import argparse
import json
import sys
import textwrap

FERRY, PEER, CEILING, FAILED = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728"


def need_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        sys.stderr.write("plot_bench: matplotlib is not installed: pip install matplotlib "
                         "(ferry itself does not need it)\n")
        raise SystemExit(2)


def _ceiling_line(ax, value, label, color, vertical, style="--"):
    if not value:
        return
    if vertical:
        ax.axvline(value, color=color, linestyle=style, linewidth=1.2, label="%s %.1f GB/s" % (label, value))
    else:
        ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label="%s %.1f GB/s" % (label, value))


def _bars(ax, labels, values, colors, errors=None):
    """Horizontal bars, largest at the top, each with its value written beside it."""
    y = list(range(len(labels)))[::-1]
    ax.barh(y, values, color=colors, xerr=errors, capsize=3 if errors else 0)
    ax.set_yticks(y)
    ax.set_yticklabels([textwrap.fill(lab, 48) for lab in labels], fontsize=8)
    ends = [v + (errors[1][i] if errors else 0) for i, v in enumerate(values)]
    top = max(ends + [1e-9])
    for yi, v, end in zip(y, values, ends):
        ax.text(end + top * 0.01, yi, "%.2f" % v if v else "n/a", va="center", fontsize=7)
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("GB/s (10^9 bytes per second)")
    ax.grid(axis="x", alpha=0.3)


# ---- ferry bench --json -------------------------------------------------------------------

def _series_name(r):
    name = r["name"]
    if r.get("task_size"):
        name += ", tasks %d MiB" % (r["task_size"] >> 20)
    if r.get("staging_buffers"):
        name += ", %d x %d MiB buffers" % (r["staging_buffers"], r["staging_buffer_size"] >> 20)
    return ("write " if r.get("write") else "") + name


def plot_ferry_bench_panel(ax, j, title, writes):
    """The reads of one `ferry bench --json` output (or, with `writes`, its writes)."""
    results = [r for r in j.get("results", []) if bool(r.get("write")) == writes]
    ceilings = {r["name"]: r["gbps"] for r in results if r["kind"] == "ceiling"}
    ferry = [r for r in results if r["kind"] in ("ferry", "baseline")]
    threads = sorted({r["threads"] for r in ferry if r["kind"] == "ferry"})
    device = j.get("device", "?")
    where = "host memory" if device == "host" else device
    state = "cold" if j.get("cold") else "hot (page cache)"
    what = ("writes from %s to a file (no fsync)" % where) if writes else ("reads into %s, %s" % (where, state))
    ax.set_title("%s: %s\n%.3g GiB, median of %s, %s CPUs" % (title, what, j.get("bytes", 0) / 2**30,
                                                           j.get("repeat", "?"), j.get("cpus", "?")), fontsize=9)
    lines = [("pread", "parallel pread (ceiling)", "#2ca02c"),
             ("pinned->device copy", "pinned -> device copy (ceiling)", "#9467bd"),
             ("pwrite", "parallel pwrite (ceiling)", "#8c564b")]
    if len(threads) > 1:
        series = {}
        for r in ferry:
            if r["kind"] == "ferry":
                series.setdefault(_series_name(r), []).append((r["threads"], r["gbps"]))
        for name, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        for key, label, color in lines:
            _ceiling_line(ax, ceilings.get(key), label, color, vertical=False)
        ax.set_xscale("log", base=2)
        ax.set_xticks(threads)
        ax.set_xticklabels([str(t) for t in threads])
        ax.set_xlabel("I/O threads (log scale)")
        ax.set_ylabel("GB/s (10^9 bytes per second)")
        ax.set_ylim(0, max([p[1] for v in series.values() for p in v] + list(ceilings.values()) + [1e-9]) * 1.15)
        ax.grid(alpha=0.3)
    else:
        labels = ["%s, %d threads" % (_series_name(r), r["threads"]) + (" (baseline)" if r["kind"] == "baseline" else "")
                  for r in ferry]
        values = [r["gbps"] for r in ferry]
        colors = [FERRY if r["kind"] == "ferry" else PEER for r in ferry]
        _bars(ax, labels, values, colors)
        for key, label, color in lines:
            _ceiling_line(ax, ceilings.get(key), label, color, vertical=True)
        ax.set_xlim(0, max(values + list(ceilings.values()) + [1e-9]) * 1.25)
    ax.legend(fontsize=7, loc="lower right")


def plot_ferry_bench(inputs, out):
    plt = need_matplotlib()
    panels = []
    for name, j in inputs:
        panels.append((name, j, False))
        if any(r.get("write") for r in j.get("results", [])):
            panels.append((name, j, True))
    heights = [max(1.8, 0.45 * sum(1 for r in j.get("results", []) if r.get("write")) + 1.4) if writes else 4.2
               for _, j, writes in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights) + 0.3 * len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, j, writes) in zip(axes[:, 0], panels):
        plot_ferry_bench_panel(ax, j, "ferry bench " + name.rsplit("/", 1)[-1], writes)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


# ---- peers_bench --json -------------------------------------------------------------------

def plot_peers(res, out):
    plt = need_matplotlib()
    host = res["params"]["host"]
    by_group = {}  # (file, cache) -> rows, in the order they ran
    for r in res["reads"]:
        by_group.setdefault((r["file"], r["cache"]), []).append(r)
    groups = list(by_group.items())
    writes = (res.get("writes") or {}).get("stats")
    # Every configuration of each peer's sweep, so that "its best" can be seen to be the best.
    swept = [(peer, r) for peer, sw in (res.get("sweeps") or {}).items() for r in sw.get("rows", [])]
    panels = len(groups) + (1 if writes else 0) + (1 if swept else 0)
    heights = [max(1.6, 0.32 * len(rows) + 1.2) for _, rows in groups] + ([0.4 * len(writes) + 1.4] if writes else [])
    heights += [0.36 * len(swept) + 1.2] if swept else []
    fig, axes = plt.subplots(panels, 1, figsize=(11, sum(heights) + 0.4 * panels),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    ceil = res.get("ceilings", {})
    where = "host memory" if host else "GPU memory"
    for ax, ((kind, cache), rows) in zip(axes[:, 0], groups):
        f = res["files"][kind]
        labels, values, colors = [], [], []
        for r in rows:
            if r["role"] == "ceiling" and r.get("gbps") and r["id"] == ("ceiling.pread" if host or cache == "cold"
                                                                       else "ceiling.copy"):
                continue  # drawn as the line
            label = r["reader"]
            if not r.get("gbps"):
                why = r.get("unavailable") or r.get("skipped") or "failed"
                label += " [%s]" % ("not importable" if "No module" in why else "did not run: see the JSON")
            labels.append(label)
            values.append(r.get("gbps") or 0.0)
            colors.append((FERRY if r["role"].startswith("ferry") else CEILING if r["role"] == "ceiling" else PEER)
                          if r.get("gbps") else FAILED)
        _bars(ax, labels, values, colors)
        c = ceil.get(cache)
        what = ceil.get("hot_what" if cache == "hot" else "cold_what", "ceiling")
        _ceiling_line(ax, c, "ceiling: " + what, "black", vertical=True)
        ax.set_xlim(0, max(values + [c or 0, 1e-9]) * 1.6)  # room on the right for the legend
        ax.set_title("%s, %.3g GiB%s -> %s, page cache %s" % (
            kind, f["payload"] / 2**30, ", %d tensors" % f["tensors"] if f.get("tensors") else "", where, cache),
            fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    if swept:
        ax = axes[len(groups), 0]
        labels = ["%s: %s" % (peer, r["label"]) if "seconds" in r else "%s: %s [failed: see the JSON]"
                  % (peer, r["label"]) for peer, r in swept]
        values = [r.get("gbps") or 0.0 for _, r in swept]
        best = {peer: max((r.get("gbps") or 0.0 for p, r in swept if p == peer), default=0) for peer, _ in swept}
        colors = [FAILED if not r.get("gbps") else PEER if r["gbps"] < best[peer] else "#a05a00" for peer, r in swept]
        _bars(ax, labels, values, colors)
        _ceiling_line(ax, ceil.get("hot"), "ceiling: " + ceil.get("hot_what", ""), "black", vertical=True)
        ax.set_xlim(0, max(values + [ceil.get("hot") or 0, 1e-9]) * 1.6)
        ax.set_title("each peer's sweep, hot: one process per configuration; its best darker", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    if writes:
        ax = axes[-1, 0]
        w = res["writes"]
        keys = list(writes)
        labels = [w.get("labels", {}).get(k, k) for k in keys]
        means = [writes[k]["mean"] for k in keys]
        err = [[writes[k]["mean"] - writes[k]["min"] for k in keys], [writes[k]["max"] - writes[k]["mean"] for k in keys]]
        colors = [FERRY if k.startswith("ferry") else CEILING if k.startswith("raw") else PEER for k in keys]
        _bars(ax, labels, means, colors, errors=err)
        ax.set_xlim(0, max(m + e for m, e in zip(means, err[1])) * 1.6)
        raw = writes.get("raw.pwrite.host" if host else "raw.pwrite")
        if raw:
            _ceiling_line(ax, raw["mean"], "raw pwrite + fsync", "black", vertical=True)
            _ceiling_line(ax, 0.9 * raw["mean"], "0.9x raw (bar)", "black", vertical=True, style=":")
        ax.set_title("durable writes of %.3g GiB to a new file: mean of %d interleaved rounds, min-max"
                     % (w["bytes"] / 2**30, len(w["order"])), fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("ferry vs peers, %s, %d CPUs, kernel %s" % (where, res["machine"]["cpus"], res["machine"]["kernel"]),
                 fontsize=10)
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=FERRY, label="ferry"), Patch(color=PEER, label="peer"),
                        Patch(color=CEILING, label="ceiling / raw baseline")],
               loc="upper right", fontsize=8, ncol=3)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="JSON files ('-': standard input)")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    a = ap.parse_args(argv)
    loaded = []
    for name in a.inputs:
        try:
            text = sys.stdin.read() if name == "-" else open(name).read()
            loaded.append((name, json.loads(text)))
        except (OSError, ValueError) as e:
            ap.error("%s: not a readable JSON file: %s" % (name, e))
    peers = [j for _, j in loaded if "reads" in j and "params" in j]
    bench = [(n, j) for n, j in loaded if "results" in j and "bytes" in j]
    if peers and bench or len(peers) > 1:
        ap.error("give either `ferry bench --json` outputs or one peers_bench JSON")
    if not peers and not bench:
        ap.error("neither `ferry bench --json` output nor a peers_bench JSON: %s" % ", ".join(a.inputs))
    if peers:
        plot_peers(peers[0], a.output)
    else:
        plot_ferry_bench(bench, a.output)
    print("plot_bench: wrote %s" % a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
