"""URLs wherever paths go: fromfile, load, info and checkpoints over http:// (a real nginx) and
s3:// (moto's S3 server), each started once for this module on 127.0.0.1 with a free port and
stopped afterwards; compared with numpy and safetensors reading the same files locally.
Checkpoints are written by huggingface_hub's splitter and safetensors, as in test_checkpoint."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import ferry
from hub_checkpoints import hub_save, reference
from servers import modules_missing, need

safetensors_numpy = pytest.importorskip("safetensors.numpy")

# NGINX_ROOT: unpacked nginx packages (as the C++ tests take them), else the system's nginx.
NGINX = next((p for p in ([os.path.join(os.environ["NGINX_ROOT"], "usr/sbin/nginx")]
                          if os.environ.get("NGINX_ROOT") else []) + ["/usr/sbin/nginx", "/usr/bin/nginx"]
              if os.path.exists(p)), None)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _start_on_free_port(command, what, seconds):
    """(process, port): command(port)'s server started on a free 127.0.0.1 port, another port
    tried (five in all) when something else took the first between its choice and the bind."""
    for _ in range(5):
        port = _free_port()
        proc = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if _wait_port(port, proc, seconds):
            return proc, port
        _stop(proc)
    pytest.fail("%s did not start" % what)


def _state(seed=0):
    rng = np.random.default_rng(seed)
    sd = {"model.embed_tokens.weight": rng.standard_normal((128, 64)).astype(np.float16)}
    for i in range(3):
        p = "model.layers.%d." % i
        for n in ("q_proj", "o_proj"):
            sd[p + "self_attn.%s.weight" % n] = rng.standard_normal((64, 64)).astype(np.float16)
        sd[p + "mlp.down_proj.weight"] = rng.standard_normal((64, 96)).astype(np.float32)
        sd[p + "input_layernorm.weight"] = rng.standard_normal(64).astype(np.float32)
    sd["lm_head.weight"] = rng.standard_normal((128, 64)).astype(np.float16)
    sd["step"] = np.array([7], np.int64)
    return sd


def _same(got, ref):
    assert sorted(got) == sorted(ref)
    for k, v in ref.items():
        g = np.asarray(got[k])
        assert g.dtype == v.dtype and g.shape == v.shape, k
        assert g.tobytes() == v.tobytes(), k


@pytest.fixture(scope="module")
def served():
    need("nginx is not installed (scripts/deps.sh installs it)" if NGINX is None else "")
    root = tempfile.mkdtemp(prefix="ferry-remote-")
    try:
        www = os.path.join(root, "www")
        os.makedirs(www)
        os.makedirs(os.path.join(root, "logs"))
        a = np.arange(4096, dtype=np.float32).reshape(64, 64)
        np.save(os.path.join(www, "a.npy"), a)
        a.tofile(os.path.join(www, "a.bin"))
        from safetensors.numpy import save_file
        tensors = {"w": a, "b": np.arange(10, dtype=np.int16)}
        save_file(tensors, os.path.join(www, "m.safetensors"))
        sd = _state()
        hub_save(os.path.join(www, "ckpt"), sd)
        hub_save(os.path.join(www, "single"), sd, max_shard_size=10 ** 9)
        hub_save(os.path.join(www, "broken"), sd)
        hub_save(os.path.join(www, "forbidden"), sd)
        first = sorted(n for n in os.listdir(os.path.join(www, "broken")) if n.endswith(".safetensors"))[0]
        os.remove(os.path.join(www, "broken", first))
        os.makedirs(os.path.join(www, "empty"))
        def nginx(port):
            conf = os.path.join(root, "nginx.conf")
            with open(conf, "w") as f:
                f.write("daemon off; master_process off; worker_processes 1;\n"
                        "error_log %s/logs/error.log warn; pid %s/nginx.pid;\n"
                        "events { worker_connections 64; }\n"
                        "http { access_log off; client_body_temp_path %s/body; proxy_temp_path %s/proxy;"
                        " fastcgi_temp_path %s/fcgi; uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;\n"
                        " server { listen 127.0.0.1:%d; root %s; location / { }"
                        " location ~ ^/forbidden/model-00002 { return 403; } } }\n"
                        % ((root,) * 7 + (port, www)))
            return [NGINX, "-p", root, "-e", root + "/logs/error.log", "-c", conf]
        proc, port = _start_on_free_port(nginx, "nginx", 10)
        try:
            yield "http://127.0.0.1:%d" % port, a, tensors, www
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_fromfile_takes_a_url(served):
    base, a, _, _ = served
    got = ferry.fromfile(base + "/a.bin", dtype=np.float32)
    np.testing.assert_array_equal(got, a.ravel())
    part = ferry.fromfile(base + "/a.bin", dtype=np.float32, count=10, offset=400)
    np.testing.assert_array_equal(part, a.ravel()[100:110])


def test_load_and_info_take_urls(served):
    base, a, tensors, _ = served
    np.testing.assert_array_equal(ferry.load(base + "/a.npy"), a)
    loaded = ferry.load(base + "/m.safetensors")
    assert sorted(loaded) == sorted(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(loaded[k], v)
    assert ferry.info(base + "/m.safetensors")["format"] == "safetensors"


def test_a_missing_url_is_a_remote_error(served):
    base, _, _, _ = served
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load(base + "/nope.npy?X-Amz-Signature=s3cr3t")
    assert e.value.status == 404
    assert "s3cr3t" not in str(e.value)
    assert isinstance(e.value, OSError)


def test_load_a_url_into_gpu_memory(served, cupy):
    base, a, tensors, _ = served
    got = ferry.load(base + "/a.npy", device="cuda", like="cupy")
    np.testing.assert_array_equal(cupy.asnumpy(got), a)
    loaded = ferry.load(base + "/m.safetensors", device="cuda", like="cupy")
    for k, v in tensors.items():
        np.testing.assert_array_equal(cupy.asnumpy(loaded[k]), v)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """One moto S3 server for the module (it takes seconds to start), with the environment that
    points ferry at it, a bucket, and checkpoints written by huggingface_hub under prefixes."""
    need(modules_missing("moto.server", "flask", "flask_cors", "boto3"))
    import boto3
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mp = pytest.MonkeyPatch()
    try:
        assert _wait_port(port, proc, 60), "moto did not start"
        endpoint = "http://127.0.0.1:%d" % port
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket="ckpt")
        local = tmp_path_factory.mktemp("s3-ckpt")
        sd = _state()
        for prefix, size in (("hub", 40_000), ("single", 10 ** 9), ("noindex", 40_000), ("broken", 40_000)):
            hub_save(str(local / prefix), sd, max_shard_size=size)
            names = sorted(os.listdir(local / prefix))
            for name in names:
                if prefix == "noindex" and name.endswith(".json"):
                    continue
                if prefix == "broken" and name == names[0]:
                    continue  # the index names it; the store does not have it
                client.upload_file(str(local / prefix / name), "ckpt", "%s/%s" % (prefix, name))
        # Keys in a deeper "folder" are not shards of the prefix above it.
        client.upload_file(str(local / "single" / "model.safetensors"), "ckpt", "noindex/deeper/stray.safetensors")
        for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            mp.setenv(k, v)
        yield {"endpoint": endpoint, "client": client, "local": local, "state": sd}
    finally:
        mp.undo()
        _stop(proc)


def test_s3_through_moto(s3, tmp_path):
    client = s3["client"]
    a = np.arange(1000, dtype=np.float64)
    np.save(tmp_path / "a.npy", a)
    client.upload_file(str(tmp_path / "a.npy"), "ckpt", "x/a.npy")
    np.testing.assert_array_equal(ferry.load("s3://ckpt/x/a.npy"), a)
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load("s3://ckpt/x/missing.npy")
    assert e.value.status == 404
    assert e.value.credentials == "environment"
    # Saves go up as multipart uploads and load back the same.
    ferry.save("s3://ckpt/y/b.npy", a)
    ferry.save("s3://ckpt/y/m.safetensors", {"a": a})
    np.testing.assert_array_equal(ferry.load("s3://ckpt/y/b.npy"), a)
    np.testing.assert_array_equal(ferry.load("s3://ckpt/y/m.safetensors")["a"], a)
    body = client.get_object(Bucket="ckpt", Key="y/b.npy")["Body"].read()
    with open(tmp_path / "b.npy", "wb") as f:
        f.write(body)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), a)


def test_checkpoint_under_an_s3_prefix(s3):
    ref = reference(str(s3["local"] / "hub"))
    for src in ("s3://ckpt/hub/", "s3://ckpt/hub", "s3://ckpt/hub/model.safetensors.index.json"):
        got = ferry.load_checkpoint(src)
        _same(got, ref)
        assert got.stats["files"] >= 4
    info = ferry.info_checkpoint("s3://ckpt/hub/")
    assert info["index"] == "s3://ckpt/hub/model.safetensors.index.json"
    assert all(sh["path"].startswith("s3://ckpt/hub/model-") for sh in info["shards"])
    # One object, and a prefix holding only model.safetensors.
    _same(ferry.load_checkpoint("s3://ckpt/single/"), reference(str(s3["local"] / "single")))
    _same(ferry.load_checkpoint("s3://ckpt/single/model.safetensors"), reference(str(s3["local"] / "single")))
    # No index: the *.safetensors objects directly under the prefix (ListObjectsV2), not deeper.
    got = ferry.load_checkpoint("s3://ckpt/noindex/")
    _same(got, ref)
    assert ferry.info_checkpoint("s3://ckpt/noindex/")["index"] is None


def test_checkpoint_slices_from_s3_read_only_what_they_need(s3):
    ref = reference(str(s3["local"] / "hub"))
    rules = ferry.tensor_parallel(1, 2, column=["*q_proj.weight"], row=["*o_proj.weight", "*down_proj.weight"])
    got = ferry.load_checkpoint("s3://ckpt/hub/", slices=rules, tensors="model.layers.*")
    for name, v in got.items():
        want = ref[name]
        if name.endswith("q_proj.weight"):
            want = want[32:]
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            want = want[:, want.shape[1] // 2:]
        assert np.asarray(v).tobytes() == np.ascontiguousarray(want).tobytes(), name
    whole = sum(ref[n].nbytes for n in got)
    assert got.stats["bytes_read"] < whole


def test_checkpoint_errors_under_an_s3_prefix(s3):
    # The index names a shard the bucket lacks: a CheckpointError naming the tensor and the URL.
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_checkpoint("s3://ckpt/broken/")
    assert "s3://ckpt/broken/model-00001" in str(e.value)
    assert "does not exist" in str(e.value)
    assert e.value.tensor
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_checkpoint("s3://ckpt/nothing-here/")
    assert "s3://ckpt/nothing-here" in str(e.value)
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load_checkpoint("s3://no-such-bucket/ckpt/")
    assert e.value.status == 404 and "NoSuchBucket" in str(e.value)
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load_checkpoint("s3://ckpt/hub/model-00009-of-00009.safetensors")
    assert e.value.status == 404 and e.value.credentials == "environment"


def test_save_checkpoint_to_s3(s3, tmp_path):
    client = s3["client"]
    sd = s3["state"]
    written = ferry.save_checkpoint("s3://ckpt/saved", sd, max_shard_size="40KB", metadata={"by": "ferry"})
    assert written[-1] == "s3://ckpt/saved/model.safetensors.index.json"
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="ckpt", Prefix="saved/")["Contents"])
    assert keys == sorted(w[len("s3://ckpt/"):] for w in written)
    # What safetensors and huggingface_hub's layout make of it: the same tensors, byte for byte.
    for key in keys:
        client.download_file("ckpt", key, str(tmp_path / os.path.basename(key)))
    index = json.load(open(tmp_path / "model.safetensors.index.json"))
    assert set(index["weight_map"]) == set(sd)
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in sd.values())
    _same(reference(str(tmp_path)), sd)
    _same(ferry.load_checkpoint("s3://ckpt/saved/"), sd)
    assert client.list_multipart_uploads(Bucket="ckpt").get("Uploads", []) == []
    # A save that fails part way: the previous generation stays whole and loadable, and
    # nothing of the failed save is left.
    bad = dict(sd)
    bad["zz.complex"] = np.zeros(4, np.complex128)  # safetensors cannot store it
    with pytest.raises(ferry.UsageError):
        ferry.save_checkpoint("s3://ckpt/saved/", bad, max_shard_size="40KB")
    left = [o["Key"] for o in client.list_objects_v2(Bucket="ckpt", Prefix="saved/")["Contents"]]
    assert sorted(left) == keys
    _same(ferry.load_checkpoint("s3://ckpt/saved/"), sd)
    assert client.list_multipart_uploads(Bucket="ckpt").get("Uploads", []) == []
    with pytest.raises(ferry.UsageError):
        ferry.save_checkpoint("https://example.invalid/ckpt/", sd)


def test_checksums_are_checked_on_s3(s3):
    """A checkpoint ferry saved under a prefix carries checksums, which a load from S3 and
    ferry.verify of the prefix check; huggingface_hub's has none: "always" refuses it."""
    sd = s3["state"]
    ferry.save_checkpoint("s3://ckpt/verified", sd, max_shard_size="40KB")
    _same(ferry.load_checkpoint("s3://ckpt/verified/", verify="always"), sd)
    rep = ferry.verify("s3://ckpt/verified/")
    assert rep["status"] == 0 and rep["tensors"] == len(sd) and len(rep["files"]) > 1
    assert ferry.verify("s3://ckpt/hub/")["status"] == 2
    with pytest.raises(ferry.IntegrityError, match="no checksums"):
        ferry.load_checkpoint("s3://ckpt/hub/", verify="always")


def test_loads_racing_saves_on_s3_never_mix_generations(s3):
    """The local race of test_checkpoint_generations under an S3 prefix: loads return one
    generation or CheckpointChangedError while another process saves, and what the last save
    left is its shards and its index."""
    from test_checkpoint_generations import race
    race("s3://ckpt/race")
    client = s3["client"]
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="ckpt", Prefix="race/")["Contents"])
    body = client.get_object(Bucket="ckpt", Key="race/model.safetensors.index.json")["Body"].read()
    index = json.loads(body)
    assert keys == sorted({"race/" + f for f in index["weight_map"].values()} | {"race/model.safetensors.index.json"})


def _b64_crc(value):
    import base64
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def test_s3_objects_own_checksums_are_checked(s3):
    """An object's own x-amz-checksum-crc32 (what boto3 records by default) or -crc32c is
    checked once the reads have covered every byte, across ranged GETs, in fromfile and load:
    a value that does not match the bytes raises IntegrityError naming the object and both
    values. A multipart upload's composite checksum cannot be checked from the bytes and loads."""
    import zlib
    client = s3["client"]
    a = np.arange(300_000, dtype=np.float32)   # 1.2 MB: several 256 KiB ranges below
    body = a.tobytes()
    crc32 = zlib.crc32(body)
    crc32c = ferry._ferry.crc32c_chunks([np.frombuffer(body, np.uint8)], len(body))[0][0]
    client.put_object(Bucket="ckpt", Key="sums/good.bin", Body=body, ChecksumAlgorithm="CRC32")
    head = client.head_object(Bucket="ckpt", Key="sums/good.bin", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32") == _b64_crc(crc32), head   # the server keeps one
    uploads = {
        "bad32.bin": dict(ChecksumAlgorithm="CRC32", ChecksumCRC32=_b64_crc(crc32 ^ 1)),
        "good32c.bin": dict(ChecksumAlgorithm="CRC32C", ChecksumCRC32C=_b64_crc(crc32c)),
        "bad32c.bin": dict(ChecksumAlgorithm="CRC32C", ChecksumCRC32C=_b64_crc(crc32c ^ 0x80000000)),
    }
    for key, extra in uploads.items():
        client.put_object(Bucket="ckpt", Key="sums/" + key, Body=body, **extra)
    import io
    npy = io.BytesIO()
    np.save(npy, a)
    client.put_object(Bucket="ckpt", Key="sums/bad.npy", Body=npy.getvalue(), ChecksumAlgorithm="CRC32",
                      ChecksumCRC32=_b64_crc(zlib.crc32(npy.getvalue()) ^ 4))
    with ferry.settings(remote_range_size=256 * 1024):
        for key in ("good.bin", "good32c.bin"):
            np.testing.assert_array_equal(ferry.fromfile("s3://ckpt/sums/" + key, np.float32), a)
        for key, alg, want, got in (("bad32.bin", "crc32", crc32 ^ 1, crc32),
                                    ("bad32c.bin", "crc32c", crc32c ^ 0x80000000, crc32c)):
            with pytest.raises(ferry.IntegrityError) as e:
                ferry.fromfile("s3://ckpt/sums/" + key, np.float32)
            text = str(e.value)
            assert "s3://ckpt/sums/" + key in text and "x-amz-checksum-" + alg in text, text
            assert (e.value.expected, e.value.actual) == ("%s:%08x" % (alg, want), "%s:%08x" % (alg, got)), text
            assert (e.value.begin, e.value.end) == (0, len(body)), text
        with pytest.raises(ferry.IntegrityError, match="x-amz-checksum-crc32"):
            ferry.load("s3://ckpt/sums/bad.npy")
    # A multipart upload: its checksum is one of the parts' checksums, not checked; it loads.
    big = np.arange((6 << 20) // 8, dtype=np.float64)
    up = client.create_multipart_upload(Bucket="ckpt", Key="sums/multi.bin", ChecksumAlgorithm="CRC32")
    parts = []
    for i, piece in enumerate((big[: (5 << 20) // 8], big[(5 << 20) // 8:]), start=1):
        r = client.upload_part(Bucket="ckpt", Key="sums/multi.bin", UploadId=up["UploadId"], PartNumber=i,
                               Body=piece.tobytes(), ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    client.complete_multipart_upload(Bucket="ckpt", Key="sums/multi.bin", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
    np.testing.assert_array_equal(ferry.fromfile("s3://ckpt/sums/multi.bin", np.float64), big)


def test_checkpoint_into_gpu_from_s3(s3, cupy):
    ref = reference(str(s3["local"] / "hub"))
    got = ferry.load_checkpoint("s3://ckpt/hub/", device="cuda", like="cupy")
    for k, v in ref.items():
        assert cupy.asnumpy(got[k]).tobytes() == v.tobytes(), k


def test_checkpoint_under_an_http_prefix(served):
    base, _, _, www = served
    ref = reference(os.path.join(www, "ckpt"))
    for src in (base + "/ckpt/", base + "/ckpt", base + "/ckpt/model.safetensors.index.json",
                base + "/ckpt/?X-Amz-Signature=s3cr3t"):
        _same(ferry.load_checkpoint(src), ref)
    # No index: the prefix's model.safetensors (an HTTP prefix cannot be listed).
    _same(ferry.load_checkpoint(base + "/single/"), reference(os.path.join(www, "single")))


def test_checkpoint_errors_under_an_http_prefix(served):
    base, _, _, _ = served
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_checkpoint(base + "/broken/?sig=s3cr3t")
    assert "does not exist" in str(e.value) and "/broken/model-00001" in str(e.value)
    assert "s3cr3t" not in str(e.value)
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_checkpoint(base + "/empty/")
    assert "cannot be listed" in str(e.value)
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load_checkpoint(base + "/forbidden/?token=s3cr3t")
    assert e.value.status == 403
    assert "/forbidden/model-00002" in str(e.value) and "s3cr3t" not in str(e.value)


# -- Zarr arrays under a remote prefix ----------------------------------------------------------

def _zarr_arrays(root):
    """Two arrays written by zarr-python under `root` (uncompressed and zstd, both with missing
    chunks that read as the fill value); returns {name: zarr's own read of it}."""
    zarr = pytest.importorskip("zarr")
    from zarr.codecs import ZstdCodec

    data = np.arange(90 * 37, dtype=np.float32).reshape(90, 37)
    out = {}
    for name, compressors in (("raw.zarr", None), ("zstd.zarr", ZstdCodec(level=1))):
        path = os.path.join(root, name)
        z = zarr.create_array(store=path, shape=(100, 37), chunks=(16, 8), dtype="float32",
                              fill_value=-1, compressors=compressors)
        z[:70] = data[:70]
        out[name] = zarr.open_array(store=path, mode="r")[...]
    return out


def _check_remote_zarr(base, refs, on_gpu=False):
    zarr = pytest.importorskip("zarr")
    import ferry.zarr as fz

    for name, ref in refs.items():
        store = fz.Store(base + "/" + name)
        assert store.read_only and not store.supports_listing and not store.supports_writes
        for pipeline in (True, False):
            with fz.enable() if pipeline else _nothing():
                if on_gpu:
                    with zarr.config.enable_gpu():
                        got = zarr.open_array(store=store, mode="r")[5:99, 3:30].get()
                else:
                    got = zarr.open_array(store=store, mode="r")[5:99, 3:30]
            assert got.tobytes() == ref[5:99, 3:30].tobytes(), (name, pipeline)
    store = fz.Store(base + "/raw.zarr")
    with pytest.raises(FileNotFoundError):  # zarr's ArrayNotFoundError is one
        zarr.open_array(store=fz.Store(base + "/nothing.zarr"), mode="r")
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_array(store=store, mode="r")[0, 0] = 5
    from zarr.core.sync import sync

    async def listing():
        return [k async for k in store.list_dir("")]

    with pytest.raises(NotImplementedError, match="cannot be listed"):
        sync(listing())


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_zarr_store_over_http(served, tmp_path):
    base, _a, _t, www = served
    refs = _zarr_arrays(os.path.join(www, "zarr"))
    _check_remote_zarr(base + "/zarr", refs)
    import ferry.zarr as fz

    # credentials in a URL never show; a root with a query string is refused
    assert "secret" not in repr(fz.Store("https://user:secret@127.0.0.1:1/x.zarr"))
    assert "secret" not in str(fz.Store("https://user:secret@127.0.0.1:1/x.zarr"))
    with pytest.raises(ferry.UsageError, match="query string"):
        fz.Store(base + "/zarr/raw.zarr?x=1")
    # a status other than 404 is an error, not a missing chunk
    _zarr_arrays(os.path.join(www, "forbidden", "model-00002"))
    zarr = pytest.importorskip("zarr")
    with pytest.raises(ferry.RemoteError) as e:
        zarr.open_array(store=fz.Store(base + "/forbidden/model-00002/raw.zarr"), mode="r")
    assert e.value.status == 403


def test_zarr_store_over_s3(s3, tmp_path):
    refs = _zarr_arrays(str(tmp_path))
    client = s3["client"]
    for dirpath, _dirs, names in os.walk(tmp_path):
        for n in names:
            full = os.path.join(dirpath, n)
            client.upload_file(full, "ckpt", "zarr/" + os.path.relpath(full, tmp_path))
    _check_remote_zarr("s3://ckpt/zarr", refs)


def test_zarr_store_over_http_into_gpu_memory(served, cupy):
    pytest.importorskip("nvidia.nvcomp", reason="nvidia-nvcomp-cu13 is not installed (zstd on the GPU)")
    base, _a, _t, www = served
    refs = _zarr_arrays(os.path.join(www, "zarr-gpu"))
    _check_remote_zarr(base + "/zarr-gpu", refs, on_gpu=True)


# -- A server without Range support -------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    """python3 -m http.server: no Range support and no Accept-Ranges, as many simple gateways."""
    root = tmp_path_factory.mktemp("plain")
    proc, port = _start_on_free_port(lambda port: [sys.executable, "-m", "http.server", str(port), "--bind",
                                                   "127.0.0.1", "--directory", str(root)],
                                     "python3 -m http.server", 20)
    try:
        yield "http://127.0.0.1:%d" % port, root
    finally:
        _stop(proc)


def test_a_server_without_range_support_is_read_with_plain_gets(plain_server):
    base, root = plain_server
    a = np.arange(5, dtype=np.int64)
    np.save(root / "small.npy", a)
    assert os.path.getsize(root / "small.npy") == 168  # the file of the report
    np.testing.assert_array_equal(ferry.load(base + "/small.npy"), a)
    big = np.random.default_rng(1).integers(0, 255, (3 << 20) + 11, dtype=np.uint8)
    big.tofile(root / "big.bin")
    np.testing.assert_array_equal(ferry.fromfile(base + "/big.bin", dtype=np.uint8), big)
    np.testing.assert_array_equal(ferry.fromfile(base + "/big.bin", dtype=np.uint8, count=1000, offset=2 << 20),
                                  big[2 << 20:(2 << 20) + 1000])
    with ferry.File(base + "/big.bin") as f:
        reasons = " ".join(f.plan()["reasons"])
    assert "no Range support" in reasons, reasons
    assert ferry.info(base + "/small.npy")["arrays"][0]["shape"] == (5,)
