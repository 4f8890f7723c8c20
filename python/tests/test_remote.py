"""URLs wherever paths go: fromfile, load and info over http:// (a real nginx) and s3:// (moto's
S3 server), both started here on 127.0.0.1 with free ports and stopped afterwards; compared
with numpy and safetensors reading the same files locally."""

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


@pytest.fixture(scope="module")
def served():
    if NGINX is None:
        pytest.skip("nginx is not installed (scripts/deps.sh installs it)")
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
        for attempt in range(5):
            port = _free_port()
            conf = os.path.join(root, "nginx.conf")
            with open(conf, "w") as f:
                f.write("daemon off; master_process off; worker_processes 1;\n"
                        "error_log %s/logs/error.log warn; pid %s/nginx.pid;\n"
                        "events { worker_connections 64; }\n"
                        "http { access_log off; client_body_temp_path %s/body; proxy_temp_path %s/proxy;"
                        " fastcgi_temp_path %s/fcgi; uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;\n"
                        " server { listen 127.0.0.1:%d; root %s; location / { } } }\n"
                        % ((root,) * 7 + (port, www)))
            proc = subprocess.Popen([NGINX, "-p", root, "-e", root + "/logs/error.log", "-c", conf],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if _wait_port(port, proc, 10):
                break
            _stop(proc)
        else:
            pytest.fail("nginx did not start")
        try:
            yield "http://127.0.0.1:%d" % port, a, tensors
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_fromfile_takes_a_url(served):
    base, a, _ = served
    got = ferry.fromfile(base + "/a.bin", dtype=np.float32)
    np.testing.assert_array_equal(got, a.ravel())
    part = ferry.fromfile(base + "/a.bin", dtype=np.float32, count=10, offset=400)
    np.testing.assert_array_equal(part, a.ravel()[100:110])


def test_load_and_info_take_urls(served):
    base, a, tensors = served
    np.testing.assert_array_equal(ferry.load(base + "/a.npy"), a)
    loaded = ferry.load(base + "/m.safetensors")
    assert sorted(loaded) == sorted(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(loaded[k], v)
    assert ferry.info(base + "/m.safetensors")["format"] == "safetensors"


def test_a_missing_url_is_a_remote_error(served):
    base, _, _ = served
    with pytest.raises(ferry.RemoteError) as e:
        ferry.load(base + "/nope.npy?X-Amz-Signature=s3cr3t")
    assert e.value.status == 404
    assert "s3cr3t" not in str(e.value)
    assert isinstance(e.value, OSError)


def test_load_a_url_into_gpu_memory(served, cupy):
    base, a, tensors = served
    got = ferry.load(base + "/a.npy", device="cuda", like="cupy")
    np.testing.assert_array_equal(cupy.asnumpy(got), a)
    loaded = ferry.load(base + "/m.safetensors", device="cuda", like="cupy")
    for k, v in tensors.items():
        np.testing.assert_array_equal(cupy.asnumpy(loaded[k]), v)


def test_s3_through_moto(tmp_path, monkeypatch):
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_port(port, proc, 60), "moto did not start"
        endpoint = "http://127.0.0.1:%d" % port
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="ckpt")
        a = np.arange(1000, dtype=np.float64)
        np.save(tmp_path / "a.npy", a)
        s3.upload_file(str(tmp_path / "a.npy"), "ckpt", "x/a.npy")
        for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)
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
        body = s3.get_object(Bucket="ckpt", Key="y/b.npy")["Body"].read()
        with open(tmp_path / "b.npy", "wb") as f:
            f.write(body)
        np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), a)
    finally:
        _stop(proc)
