#!/usr/bin/env python3
"""What checksums cost, through the ferry CLI alone (for machines where the Python package is
not built, e.g. a GPU machine with another Python): `ferry load` of a hot checkpoint with
`--verify always` against `--verify never`, `ferry convert` with and without checksums, and
`ferry verify`, readers taking turns, best of --rounds.

Writes (once, reused) a checkpoint of --tensors bf16 tensors totalling --size in 6 shards with
safetensors and huggingface_hub's splitter (no checksums), then converts each shard with
`ferry convert --device D` into --dir/ferry (checksums recorded, on the GPU with cuda) and the
index beside them; `--no-checksums` into --dir/plain for the save comparison.

  python3 bench/integrity_cli_bench.py --cli build/tools/ferry --dir /root/ib --size 4.5G \\
      --tensors 600 --device cuda

Prints a table, then one JSON object.
"""

import argparse
import json
import os
import shutil
import subprocess
import time


def make_checkpoint(folder, size, count):
    import torch
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file
    per = max(1, size // count // 2)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(per, generator=g).to(torch.bfloat16)
    sd = {}
    for i in range(count):
        t = base.clone()
        t[0] = i
        sd["model.layers.%04d.weight" % i] = t
    split = split_torch_state_dict_into_shards(sd, max_shard_size=size // 6 + 1,
                                               filename_pattern="model{suffix}.safetensors")
    os.makedirs(folder, exist_ok=True)
    for name, names in split.filename_to_tensors.items():
        save_file({n: sd[n] for n in names}, os.path.join(folder, name), metadata={"format": "pt"})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f)


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout, dt


def convert_all(cli, src, dst, device, checksums):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    total = 0.0
    for name in sorted(os.listdir(src)):
        if name.endswith(".json"):
            shutil.copy(os.path.join(src, name), dst)
            continue
        cmd = [cli, "convert", "-q", "--device", device, os.path.join(src, name), os.path.join(dst, name)]
        if not checksums:
            cmd.append("--no-checksums")
        total += run(cmd)[1]
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--tensors", type=int, default=512)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = int(float(a.size[:-1]) * units[a.size[-1].upper()]) if a.size[-1].upper() in units else int(a.size)
    src, on, off = (os.path.join(a.dir, d) for d in ("source", "ferry", "plain"))
    if not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        make_checkpoint(src, size, a.tensors)
    nbytes = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
    conv_on, conv_off = [], []
    for _ in range(a.rounds):
        conv_off.append(convert_all(a.cli, src, off, a.device, False))
        conv_on.append(convert_all(a.cli, src, on, a.device, True))
    loads = {"never": [], "always": []}
    run([a.cli, "load", on, "--device", a.device, "--verify", "never", "--json"])  # warm the cache
    for _ in range(a.rounds):
        for mode in ("never", "always"):
            out, _ = run([a.cli, "load", on, "--device", a.device, "--verify", mode, "--json"])
            loads[mode].append(json.loads(out)["gbps"])
    ver = []
    for _ in range(a.rounds):
        out, dt = run([a.cli, "verify", "--json", on])
        rep = json.loads(out)
        assert rep["status"] == 0, rep
        ver.append(rep["gb_per_s"])
    res = {"device": a.device, "bytes": nbytes, "tensors": a.tensors, "rounds": a.rounds,
           "convert_checksums_s": min(conv_on), "convert_plain_s": min(conv_off),
           "load_never_gbps": max(loads["never"]), "load_always_gbps": max(loads["always"]),
           "verify_gbps": max(ver), "loads": loads}
    print("integrity via the CLI on %s: %.2f GiB, %d tensors, best of %d" % (a.device, nbytes / 2**30,
                                                                              a.tensors, a.rounds))
    print("  convert all shards: checksums %.3f s / plain %.3f s = %.3fx speed" % (
        min(conv_on), min(conv_off), min(conv_off) / min(conv_on)))
    print("  load: verify always %.2f / never %.2f GB/s = %.3fx" % (
        res["load_always_gbps"], res["load_never_gbps"], res["load_always_gbps"] / res["load_never_gbps"]))
    print("  ferry verify: %.2f GB/s" % res["verify_gbps"])
    print(json.dumps(res))


if __name__ == "__main__":
    main()
