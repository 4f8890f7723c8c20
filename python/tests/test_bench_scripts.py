"""The side-by-side benchmark (bench/peers_bench.py) and the plot script (bench/plot_bench.py)
run here in host mode on small files: every row is measured or says why not, the JSON holds
what the tables print, and plots come out as PNGs (or a clear message without matplotlib)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
CLI = os.environ.get("FERRY_CLI", "")
sys.path.insert(0, BENCH)
import peer_configs as pc  # noqa: E402

READERS = "ferry.fromfile,ferry.cli.raw,numpy.fromfile,ceiling.pread,kvikio.default,kvikio.best,ferry.load.st"


def run(args, timeout=300, **env_extra):
    env = dict(os.environ, FERRY_CLI=CLI or "/nonexistent/ferry", **env_extra)
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("peers")
    out = d / "peers.json"
    r = run([os.path.join(BENCH, "peers_bench.py"), "--host", "--dir", str(d), "--size", "8M",
             "--npy-size", "4M", "--st-size", "4M", "--layers", "4", "--repeat", "2", "--write-size", "4M",
             "--write-rounds", "2", "--cache-drop", "fadvise", "--only", READERS, "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out) as f:
        return json.load(f), r.stdout, d


def test_every_reader_is_measured_or_says_why(host_run):
    res, table, _ = host_run
    rows = {(r["id"], r["cache"]): r for r in res["reads"]}
    for rid in READERS.split(","):
        r = rows[(rid, "hot")]
        assert r.get("gbps") or r.get("unavailable") or r.get("skipped"), r
    for rid in ("ferry.fromfile", "numpy.fromfile", "ceiling.pread", "ferry.load.st"):
        r = rows[(rid, "hot")]
        assert r["gbps"] > 0 and r["bytes"] == res["files"][r["file"]]["payload"], r
        assert len(r["runs"]) == 2
    assert res["files"]["safetensors"]["tensors"] == 4 * 9 + 3
    if CLI:
        assert rows[("ferry.cli.raw", "hot")]["gbps"] > 0
        assert rows[("ferry.cli.raw", "hot")]["io"]
    else:
        assert "no ferry CLI" in rows[("ferry.cli.raw", "hot")]["unavailable"]
    if importlib.util.find_spec("kvikio") is None:
        # the default row and the best one (whose sweep could not run) both say why
        assert "No module named 'kvikio'" in rows[("kvikio.default", "hot")]["unavailable"]
        assert "No module named 'kvikio'" in rows[("kvikio.best", "hot")]["unavailable"]
        assert "No module named 'kvikio'" in res["sweeps"]["kvikio"]["unavailable"]
        assert "not importable" in table and "kvikio's sweep: " in table
    else:
        sweep = res["sweeps"]["kvikio"]["rows"]
        assert len(sweep) == len(pc.kvikio_grid())
        best = pc.best_of(sweep)
        assert rows[("kvikio.best", "hot")]["config"] == best["config"]
        assert "its best (%s)" % best["label"] in rows[("kvikio.best", "hot")]["reader"]
    # cold rows: the page cache dropped before each, and the method said
    for rid in ("ceiling.pread", "ferry.fromfile", "ferry.load.st"):
        assert rows[(rid, "cold")]["cache_drop"] == "fadvise"
    # ratios against the ceiling and ferry / peer, as the table prints them
    numpy_row = rows[("numpy.fromfile", "hot")]
    assert numpy_row["vs_ceiling"] == pytest.approx(numpy_row["gbps"] / res["ceilings"]["hot"])
    assert numpy_row["ferry_py_over_this"] == pytest.approx(rows[("ferry.fromfile", "hot")]["gbps"]
                                                            / numpy_row["gbps"])
    assert "| raw | hot | ferry.fromfile (host) |" in table
    assert "ferry Python / this" in table


def test_a_sweep_keeps_every_configuration_and_the_errors_of_those_that_fail():
    # Each configuration is measured by the callback (a worker process in the benches); one
    # the peer refuses stays in the table with its error, and the best is the fastest that ran.
    def measure(cfg):
        if cfg["threads"] == 3:
            return {"skipped": "RuntimeError: backend URING is not available on this system.\nmore"}
        if cfg["threads"] == 4:
            raise OSError("worker crashed")
        return {"id": "x", "seconds": 1.0 / cfg["threads"], "runs": [1.0, 1.0 / cfg["threads"]]}
    grid = [{"threads": 1, "task_size": 16 << 20}, {"threads": 3}, {"threads": 2, "_obj": object()},
            {"threads": 4}]
    rows = pc.sweep(grid, measure)
    assert [r["label"] for r in rows] == ["threads=1 task_size=16M", "threads=3", "threads=2", "threads=4"]
    assert rows[1]["failed"] == "RuntimeError: backend URING is not available on this system."
    assert rows[3]["failed"] == "OSError: worker crashed"
    assert "seconds" not in rows[1] and rows[0]["runs"] == [1.0, 1.0]
    assert rows[2]["config"] == {"threads": 2}  # library objects stay out of the JSON
    assert pc.best_of(rows) is rows[2]
    assert pc.best_of([rows[1], rows[3]]) is None
    assert pc.describe({}) == "defaults"
    # every grid is plain data (it travels to the worker as JSON) and names its knobs
    for grid in (pc.kvikio_grid(), pc.instanttensor_grid(), pc.fastsafetensors_grid(), pc.safetensors_grid()):
        assert grid and json.loads(json.dumps(grid)) == grid


def test_each_reader_says_where_it_ran(host_run):
    # The CPU each Python reader's process ran on and that CPU's NUMA node, next to the
    # machine's nodes and the GPUs' (slow processes of one run can then be told apart; the CLI
    # runs as its own program and is not placed).
    res, _, _ = host_run
    sys.path.insert(0, BENCH)
    import bench_common as bc

    assert res["machine"]["numa_nodes"] == len(bc.numa_nodes())
    assert isinstance(res["machine"]["gpu_numa_nodes"], list)
    measured = [r for r in res["reads"] if "seconds" in r and r["role"] != "ferry-cli"]
    assert measured
    for r in measured:
        pl = r["placement"]
        assert 0 <= pl["cpu"] < os.cpu_count()
        if bc.numa_nodes():
            assert pl["node"] in bc.numa_nodes() and pl["node"] in pl["allowed_nodes"]
    assert bc._cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert bc._cpu_list("") == set()


def test_durable_writes_are_interleaved_and_paired(host_run):
    res, table, d = host_run
    w = res["writes"]
    assert w["bytes"] == 4 << 20
    for k in ("ferry.tofile.host", "ferry.save.npy.host", "raw.pwrite.host"):
        assert w["stats"][k]["n"] == 2 and w["stats"][k]["mean"] > 0
    assert w["order"][0] != w["order"][1], "the order turns each round"
    assert set(w["paired"]) >= {"ferry.tofile.host/raw", "ferry.save.npy.host/raw"}
    assert "## Durable writes" in table
    assert not [p for p in os.listdir(d) if p.startswith("peers-write-")], "written files are removed"


def test_the_bench_refuses_gpu_mode_without_a_gpu(tmp_path):
    # No GPU visible to it (also where there is one): GPU mode says so and points to --host.
    r = run([os.path.join(BENCH, "peers_bench.py"), "--dir", str(tmp_path), "--size", "1M"],
            CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 2
    assert "no usable GPU" in r.stderr and "--host" in r.stderr


def test_plots(host_run, tmp_path):
    res, _, d = host_run
    png = tmp_path / "peers.png"
    r = run([os.path.join(BENCH, "peers_bench.py"), "--replot", str(d / "peers.json"), "--plot", str(png)])
    bench_json = tmp_path / "bench.json"
    if CLI:
        b = subprocess.run([CLI, "bench", "--size", "8M", "--device", "host", "--threads", "1,2", "--repeat", "1",
                            "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert b.returncode == 0, b.stderr
        bench_json.write_text(b.stdout)
    else:  # the shape `ferry bench --json` prints, two thread counts
        rows = [{"kind": "ceiling", "name": "pread", "threads": 2, "task_size": 4 << 20, "write": False, "gbps": 3.0},
                {"kind": "ferry", "name": "host", "threads": 1, "task_size": 32 << 20, "write": False, "gbps": 1.5},
                {"kind": "ferry", "name": "host", "threads": 2, "task_size": 32 << 20, "write": False, "gbps": 2.5}]
        bench_json.write_text(json.dumps({"bytes": 8 << 20, "device": "host", "repeat": 1, "results": rows}))
    bpng = tmp_path / "bench.png"
    rb = run([os.path.join(BENCH, "plot_bench.py"), str(bench_json), "-o", str(bpng)])
    if not HAVE_MPL:
        for proc in (r, rb):
            assert proc.returncode == 2 and "matplotlib is not installed" in proc.stderr
        return
    for proc, path in ((r, png), (rb, bpng)):
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


@pytest.mark.skipif(not CLI, reason="FERRY_CLI is not set (ctest sets it to the built CLI)")
def test_cold_sweep_and_numa_probe_measure_every_config(tmp_path):
    # The cold sweep: each config measured every round against the pread ceiling, with the
    # route ferry took; a malformed config is refused by name. The NUMA probe: every node of the
    # machine measured every round.
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(8 << 20))
    out = tmp_path / "cold.json"
    r = run([os.path.join(BENCH, "probes", "cold_sweep.py"), str(f), "--ferry", CLI, "--rounds", "2",
             "--config", "default=", "--config", "small=FERRY_STAGING_BUFFER_SIZE=1M", "--cache-drop", "fadvise",
             "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"pread", "default", "small"}
    for name in ("default", "small"):
        assert rows[name]["GBps"] > 0 and rows[name]["vs_pread"] > 0 and rows[name]["routes"], rows
    bad = run([os.path.join(BENCH, "probes", "cold_sweep.py"), str(f), "--ferry", CLI, "--config", "x=NOTFERRY=1"])
    assert bad.returncode != 0 and "x=NOTFERRY=1" in bad.stderr
    if not shutil.which("taskset"):
        pytest.skip("taskset is not installed: the NUMA probe was not run")
    out = tmp_path / "numa.json"
    r = run([os.path.join(BENCH, "probes", "numa_probe.py"), str(f), "--ferry", CLI, "--rounds", "2", "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    rates = json.loads(out.read_text())["rates"]
    assert rates and all(len(v) == 2 and min(v) > 0 for v in rates.values()), rates


def test_tp_breakdown_measures_every_case(tmp_path):
    # A checkpoint with checkpoint_bench's names and shapes (small), loaded in host memory: each
    # case is measured, halves read about half, and forced routes show in the plan.
    sys.path.insert(0, BENCH)
    from checkpoint_bench import shapes
    import numpy as np
    import ferry

    folder = tmp_path / "ck"
    ferry.save_checkpoint(str(folder), {n: np.ones(s, dtype=np.float16) for n, s in shapes(8 << 20, 2)},
                          max_shard_size="2MB")
    out = tmp_path / "tp.json"
    r = run([os.path.join(BENCH, "probes", "tp_breakdown.py"), "--dir", str(folder), "--device", "cpu", "--rounds", "2",
             "--json", str(out)], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tp vs whole" in r.stdout
    cases = json.loads(out.read_text())["cases"]
    assert set(cases) == {"whole", "col", "row", "tp", "row_span", "tp_seg"}
    whole = cases["whole"]["bytes"]
    assert 0.45 * whole < cases["tp_seg"]["bytes"] <= cases["tp"]["bytes"] < 0.6 * whole
    assert cases["row_span"]["routes"].get("segments", 0) == 0 and cases["row_span"]["routes"]["span"] > 0
    assert cases["tp_seg"]["routes"].get("span", 0) == 0 and cases["tp_seg"]["routes"]["segments"] > 0
    bad = run([os.path.join(BENCH, "probes", "tp_breakdown.py"), "--dir", str(folder), "--device", "cpu", "--cases", "nope"])
    assert bad.returncode != 0 and "unknown case 'nope'" in bad.stderr


def test_open_probe_times_the_index_and_the_headers(tmp_path):
    # A sharded checkpoint with its index: each part is timed and named; a folder without
    # shards is refused.
    import numpy as np
    import ferry

    folder = tmp_path / "ck"
    ferry.save_checkpoint(str(folder), {"t%02d" % i: np.ones((64, 64), np.float32) for i in range(12)},
                          max_shard_size="40KB")
    r = run([os.path.join(BENCH, "probes", "open_probe.py"), str(folder), "--rounds", "3"], timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "12 tensors" in r.stdout and "shards" in r.stdout
    for part in ("index and headers", "the shard files", "one shard", "open and close"):
        line = next(x for x in r.stdout.splitlines() if part in x)
        assert re.search(r"min \d+\.\d+ ms, median \d+\.\d+ ms", line), line
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = run([os.path.join(BENCH, "probes", "open_probe.py"), str(empty)])
    assert bad.returncode != 0 and "no .safetensors files" in bad.stderr


@pytest.mark.skipif(not CLI, reason="FERRY_CLI is not set (ctest sets it to the built CLI)")
def test_ferry_bench_measures_the_registered_path_or_says_why(tmp_path):
    # `ferry bench --paths registered`: the file registered once for that path's rows only, its
    # reads counted on the registered route, the registration's time reported; into host
    # memory the path is refused by name.
    import ferry
    gpu = ferry.cuda_device_count() > 0
    args = [CLI, "bench", "--size", "64M", "--paths", "registered,staged", "--threads", "4", "--task-size", "8M",
            "--repeat", "1", "--no-naive", "--json"] + ([] if gpu else ["--device", "host"])
    b = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if not gpu:
        assert b.returncode != 0 and "--paths registered" in b.stderr and "GPU memory only" in b.stderr, b.stderr
        return
    assert b.returncode == 0, b.stderr[-2000:]
    j = json.loads(b.stdout)
    assert j["register_seconds"] > 0
    reg = [r for r in j["results"] if r["kind"] == "ferry" and r["name"] == "registered"]
    staged = [r for r in j["results"] if r["kind"] == "ferry" and r["name"] == "staged"]
    assert reg and staged
    for r in reg:
        assert r["io"]["routes"] == {"registered device-dma": j["bytes"]}, r["io"]
    for r in staged:  # after the registered rows, the registration is gone
        assert "registered device-dma" not in r["io"].get("routes", {}), r["io"]


def test_into_import_probe_measures_every_way():
    pytest.importorskip("torch")
    r = run([os.path.join(BENCH, "probes", "into_import_probe.py"), "--tensors", "40", "--repeat", "2"], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("40 tensors on cpu")
    assert [ln.split()[0] for ln in lines[1:]] == ["objects", "capsules", "into="]
    assert all(float(ln.split()[1]) > 0 for ln in lines[1:])


def test_dcp_resolve_probe_times_both_ways_and_checks_the_load():
    pytest.importorskip("torch")
    r = run([os.path.join(BENCH, "probes", "dcp_resolve_probe.py"), "--size", "1M", "--tensors", "8",
             "--rounds", "1"], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert re.match(r"\d+ read items, best of 1", lines[0]) and int(lines[0].split()[0]) >= 24, lines
    ways = {ln.split(" resolve ")[0].strip(): float(ln.split(" resolve ")[1].split()[0]) for ln in lines[1:]}
    assert set(ways) == {"ferry.dcp resolve_tensor", "planner.resolve_tensor"}, ways
    assert all(v > 0 for v in ways.values()), ways


def test_dcp_read_probe_gives_the_phases_and_a_profile():
    pytest.importorskip("torch")
    r = run([os.path.join(BENCH, "probes", "dcp_read_probe.py"), "--size", "1M", "--tensors", "8",
             "--rounds", "1", "--top", "5"], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"^dcp.load ([\d.]+) ms: planning ([\d.]+) ms, read_data ([\d.]+) ms \(32 items\)$", r.stdout, re.M)
    assert m and float(m.group(1)) >= float(m.group(3)) > 0, r.stdout
    assert "ncalls" in r.stdout and "read_data" in r.stdout, r.stdout
    # Beside the load: without the checks, the reader's pieces by ferry alone, the raw read.
    for pattern in (r"^dcp.load, verify='never': ([\d.]+) ms$", r"^the reader's 24 pieces read by ferry alone: ([\d.]+) ms$",
                    r"^raw read of the 1 files into one buffer: ([\d.]+) ms$"):
        m = re.search(pattern, r.stdout, re.M)
        assert m and float(m.group(1)) > 0, (pattern, r.stdout)


def test_verify_probe_times_both_modes_every_round(tmp_path):
    r = run([os.path.join(BENCH, "probes", "verify_probe.py"), "--dir", str(tmp_path / "v"), "--tensors", "300",
             "--rounds", "2"], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = re.findall(r"^round (\d) verify=(\w+) +call +([\d.]+) ms +library +([\d.]+) ms$", r.stdout, re.M)
    assert [(n, m) for n, m, _, _ in rows] == [("0", "never"), ("0", "always"), ("1", "never"), ("1", "always")], r.stdout
    assert all(float(call) >= float(lib) > 0 for _, _, call, lib in rows), rows


def test_many_files_bench_measures_every_reader(tmp_path):
    # A few hundred files: every reader's row is printed and its arrays were checked.
    out = tmp_path / "many.json"
    r = run([os.path.join(BENCH, "many_files_bench.py"), "--dir", str(tmp_path), "--files", "300",
             "--min-bytes", "1024", "--max-bytes", "8192", "--rounds", "1", "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("np.load loop", "np.load 16 threads", "ferry.load loop", "ferry.load_many", "ferry.iter_load"):
        assert re.search(r"\| %s \| \d+\.\d+ \| \d+ \|" % re.escape(name), r.stdout), r.stdout
    with open(out) as f:
        assert json.load(f)["files"] == 300


def test_many_files_bench_on_the_gpu_sweeps_the_dataloader(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    r = run([os.path.join(BENCH, "many_files_bench.py"), "--dir", str(tmp_path), "--files", "300",
             "--min-bytes", "1024", "--max-bytes", "8192", "--rounds", "1", "--device", "cuda",
             "--sweep-files", "200"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DataLoader sweep on 200 files" in r.stderr and r.stderr.count(" w, b ") == 20, r.stderr[-2000:]
    rows = re.findall(r"^\| (DataLoader\b[^|]*) \| \d+\.\d+ \| \d+ \|", r.stdout, re.M)
    assert {"DataLoader (0 workers, batch 1)", "DataLoader (8 workers, batch 64, prefetch_factor 2, pin_memory)"} \
        <= {x.replace(", the fastest", "") for x in rows}, rows
    # The ratios are to the fastest DataLoader row, marked as such.
    assert re.search(r"^\| DataLoader\b[^|]*, the fastest \| .* \| 1\.00x \| [\d.]+x \|$", r.stdout, re.M), r.stdout
    for name in ("ferry.load loop", "load_many cupy", "load_many torch"):
        assert re.search(r"\| %s \| \d+\.\d+ \| \d+ \|" % re.escape(name), r.stdout), r.stdout


URING_BASELINE = os.path.join(os.path.dirname(CLI), "..", "bench", "ferry_uring_files") if CLI else ""


@pytest.mark.skipif(not CLI, reason="FERRY_CLI is not set (ctest sets it to the built CLI, beside the baseline)")
def test_many_files_bench_cold_against_the_io_uring_baseline(tmp_path):
    if not os.access(URING_BASELINE, os.X_OK):
        pytest.skip("bench/ferry_uring_files is not built (the build found no liburing)")
    r = run([os.path.join(BENCH, "many_files_bench.py"), "--dir", str(tmp_path), "--files", "200",
             "--min-bytes", "1024", "--max-bytes", "8192", "--rounds", "1", "--cold", "--uring", URING_BASELINE])
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("io_uring baseline, depth 16", "ferry.load_many", "np.load 16 threads",
                 "io_uring baseline, depth 16 (hot)"):
        assert re.search(r"\| %s \| \d+\.\d+ \| \d+ \|" % re.escape(name), r.stdout), r.stdout
    assert "cold: each reader" in r.stdout
    bad = run([os.path.join(BENCH, "many_files_bench.py"), "--dir", str(tmp_path), "--files", "10", "--cold"])
    assert bad.returncode != 0 and "--uring" in bad.stderr


def test_dcp_bench_measures_every_writer_and_reader(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "dcp.json"
    r = run([os.path.join(BENCH, "dcp_bench.py"), "--dir", str(tmp_path / "d"), "--size", "2M",
             "--tensors", "8", "--threads", "1,2", "--rounds", "1", "--cache-drop", "fadvise", "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out) as f:
        rows = json.load(f)["rows"]
    who = {(row["what"].split(",")[0].split(" ")[0], row["who"]) for row in rows}
    for want in [("save", "ferry.dcp.FileSystemWriter"), ("save", "torch FileSystemWriter thread_count=2"),
                 ("save", "ferry.dcp.FileSystemWriter thread_count=2"),
                 ("save", "ceiling: 16-thread pwrite + fsync, 1 file"),
                 ("save", "ceiling: 16-thread pwrite + fsync, 16 files"),
                 ("save", "ceiling: 16-thread pwrite, 1 file"), ("save", "ceiling: 16-thread pwrite, 16 files"),
                 ("load", "ferry.dcp.FileSystemReader"), ("load", "ferry.dcp.FileSystemReader, verify='never'"),
                 ("load", "torch FileSystemReader"), ("load", "ceiling: 16-thread buffered read of the files"),
                 ("async_save", "ferry.dcp.FileSystemWriter, a new one each save: caller blocked"),
                 ("async_save", "ferry.dcp.FileSystemWriter, made once with cache_staged_state_dict=True: "
                                "caller blocked"),
                 ("async_save", "training step (8 matmuls), while the save writes")]:
        assert want in who, (want, sorted(who))
    cold = {row["who"] for row in rows if row["what"].startswith("load, cold")}
    assert cold == {"ferry.dcp.FileSystemReader", "ferry.dcp.FileSystemReader, verify='never'",
                    "torch FileSystemReader", "ceiling: 16-thread buffered read of the files"}, cold
    assert all(row["seconds"] > 0 for row in rows)
    for row in rows:
        assert "| %s | %s |" % (row["what"], row["who"]) in r.stdout


def test_many_tensors_bench_measures_loads_saves_and_the_moe_shape(tmp_path):
    # Small counts: every reader and writer is timed and checked for its tensor count, in the
    # plain shape (numpy) and in the MoE shape (torch, bf16 scales beside matrices).
    out = tmp_path / "mt.json"
    r = run([os.path.join(BENCH, "many_tensors_bench.py"), "--dir", str(tmp_path), "--tensors", "300",
             "--rounds", "1", "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out) as f:
        got = json.load(f)["results"]["300"]
    for key in ("ferry_load", "safetensors_load", "ferry_into", "ferry_save", "safetensors_save"):
        assert got[key]["seconds"] > 0, key
    assert 0 <= got["ferry_load"]["wrap"] <= got["ferry_load"]["library"]
    assert re.search(r"^\| 300 \| \d+\.\d+ \|", r.stdout, re.M), r.stdout
    pytest.importorskip("torch")
    # Every reader in one process, as --one-process asks (the run above: a process a group).
    r = run([os.path.join(BENCH, "many_tensors_bench.py"), "--dir", str(tmp_path), "--tensors", "200", "--moe",
             "--matrices", "3", "--matrix-bytes", "65536", "--rounds", "1", "--json", str(out), "--one-process"])
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out) as f:
        got = json.load(f)["results"]["200"]
    assert got["ferry_load"]["seconds"] > 0 and got["safetensors_load"]["seconds"] > 0


def test_fromfile_probe_reports_every_round_and_which_ferry(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(os.urandom(3 << 20))
    r = run([os.path.join(BENCH, "probes", "fromfile_probe.py"), str(f), "--device", "cpu", "--rounds", "3",
             "--label", "here"], timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["label"] == "here" and out["bytes"] == 3 << 20
    assert len(out["gbps"]) == 3 and all(g > 0 for g in out["gbps"]) and out["best"] == max(out["gbps"])
    assert os.path.isfile(os.path.join(out["ferry"], "__init__.py"))
    missing = run([os.path.join(BENCH, "probes", "fromfile_probe.py"), str(tmp_path / "nope.bin"), "--device", "cpu"])
    assert missing.returncode != 0 and "nope.bin" in missing.stderr


def test_zarr_bench_on_the_gpu_sweeps_tiles_and_measures_the_zstd_ceiling(tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("zarr")
    import ferry.zarr as fz

    if fz.nvcomp_unavailable_reason():
        pytest.skip(fz.nvcomp_unavailable_reason())
    out = tmp_path / "zarr.json"
    r = run([os.path.join(BENCH, "zarr_bench.py"), "--dir", str(tmp_path / "z"), "--size", "64M",
             "--chunk", "1M", "--zstd-chunk", "1M", "--shard", "4M", "--inner", "256K", "--repeat", "1",
             "--skip-cpu", "--tiles", "256K,1M", "--json", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    for name in ("(d) 256K tiles: ferry raw read", "(d) 256K tiles: ferry.zarr", "(d) 1M tiles: ferry.zarr",
                 "(e) nvCOMP batched decode, chunks in GPU memory",
                 "(e) pinned -> device copy of the compressed bytes"):
        assert rows[name]["GBps"] > 0, (name, sorted(rows))
    assert re.search(r"^\| \(b\) zstd vs its ceiling \(e\) \| \d+\.\d+x \| >= 0\.85x \| (yes|no) \|$", r.stdout, re.M)
    assert re.search(r"^\| \(d\) 256K tiles vs ferry raw read \| \d+\.\d+x \|", r.stdout, re.M), r.stdout


def test_file_open_probe_times_opens_on_both_threads_and_the_batch(tmp_path):
    probe = os.path.join(BENCH, "probes", "file_open_probe.py")
    r = run([probe, "--dir", str(tmp_path), "--files", "64", "--size", "4K", "--rounds", "2"])
    assert r.returncode == 0, r.stderr[-2000:]
    for what in ("open and close, main thread", "open and close, another thread", "read_batch of every file"):
        assert re.search(r"^\| %s[^|]* \| \d+\.\d \d+\.\d \|$" % re.escape(what), r.stdout, re.M), r.stdout
