#!/usr/bin/env python3
"""Where the wrapping of an MoE-shaped load's 50,000 torch tensors goes: the call's phases as
the library reports them, the same wrapping alone (no reads running beside it), torch's own
cost of the views, and the load with fewer I/O threads (each in a process of its own).
    python3 bench/probes/wrap_probe.py --dir DIR --device cuda [--threads 8,12]
"""
import gc, os, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import many_tensors_bench as mtb  # noqa: E402


def more(ap):
    ap.add_argument("--threads", default="")
    ap.add_argument("--only-load", action="store_true")


a, folder, _ = mtb.moe_probe_setup(__doc__, more)
import ferry, torch  # noqa: E402
import ferry._checkpoint as ck  # noqa: E402
sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
orig = ck.torch_bulk
cap = {}


def keeping(dev):
    run = orig(dev)

    def keep(block, entries):
        t = time.perf_counter()
        out = run(block, entries)
        cap.update(run=run, block=block, entries=entries, bulk=time.perf_counter() - t, bulk_end=time.perf_counter())
        return out
    return keep


ck.torch_bulk = keeping


def phases():
    t0 = time.perf_counter(); r = ferry.load_checkpoint(folder, like="torch", device=a.device); sync()
    t = time.perf_counter() - t0
    # The views are made by the end of the bulk wrapper: "tail" is the call's time after it (the
    # reads still running, then what follows them), near 0 where the wrapping ends the call.
    s = r.stats
    t1 = time.perf_counter(); del r; free = time.perf_counter() - t1
    return t, {"open": s["open_seconds"], "load": s["seconds"], "wrap": s["wrap_seconds"], "bulk": cap["bulk"],
               "headers": s["headers_seconds"], "first_read": s["first_read_seconds"], "tail": t0 + t - cap["bulk_end"], "after": t - s["open_seconds"] - s["seconds"], "free": free}


best = None
for _ in range(a.rounds):
    row = phases()
    if best is None or row[0] < best[0]:
        best = row
tag = "threads %s" % os.environ.get("FERRY_THREADS", "default")
print("%-22s call %7.1f ms  %s" % (tag, best[0] * 1e3, "  ".join("%s %.1f" % (k, v * 1e3) for k, v in best[1].items())))
if a.only_load:
    sys.exit(0)

run, block, entries = cap["run"], cap["block"], cap["entries"]
alone = []
for _ in range(a.rounds):
    gc.disable(); t = time.perf_counter(); o = run(block, entries); alone.append(time.perf_counter() - t); gc.enable()
    t = time.perf_counter(); gc.collect(0); g = time.perf_counter() - t
    del o
print("%-22s %7.1f ms (gc of it %.1f ms)" % ("wrap alone", min(alone) * 1e3, g * 1e3))
n = sum(e[4] for e in entries if len(e) == 5)
for dev in ("cpu", a.device):
    b = torch.empty(n * 4096, dtype=torch.uint8, device=dev)
    ts = []
    for _ in range(a.rounds):
        gc.disable(); t = time.perf_counter(); xs = b.view(torch.bfloat16).view(n, 2048).unbind(0); ts.append(time.perf_counter() - t); gc.enable()
        del xs
    print("%-22s %7.1f ms for %d views" % ("unbind on " + dev, min(ts) * 1e3, n))
for th in filter(None, a.threads.split(",")):
    env = dict(os.environ, FERRY_THREADS=th)
    subprocess.run([sys.executable, __file__, "--dir", a.dir, "--device", a.device, "--rounds", str(a.rounds),
                    "--tensors", str(a.tensors), "--matrices", str(a.matrices), "--only-load"], env=env)
