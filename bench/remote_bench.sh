#!/usr/bin/env bash
# Remote reads over loopback, on the GPU machine: nginx serves one object on 127.0.0.1 and four
# readers fetch it, best of REPEAT runs each:
#   curl     SPLIT parallel ranged `curl` downloads into /dev/null (the ceiling)
#   ferry    ferry::file into GPU memory: the engine's staged, streaming path (ferry_remote_bench)
#   ferry-raw the http source alone, ranged GETs into per-thread pinned buffers (--raw)
#   ferry-cli `ferry load http://…` (when the CLI takes URLs)
#   kvikio   kvikio.RemoteFile into a cupy array, at its defaults and at the best of its knobs
#            (threads x task size x bounce buffer size, each configuration a fresh process)
# and prints a table with GB/s and the ratios against the bars (ferry >= 0.9x curl, >= 2x KvikIO).
#
# Environment:
#   NGINX_ROOT     folder where the nginx .debs were unpacked (dpkg -x nginx*.deb libnginx*.deb …
#                  "$NGINX_ROOT"); default: the system's nginx
#   SIZE           object size (default 8G; e.g. SIZE=1G for a quick run)
#   SPLIT          parallel curl ranges (default 16)
#   REPEAT         runs per reader (default 3)
#   BUILD          build folder (default build)
#   PYTHON         Python with cupy and kvikio (default python3)
#   KVIKIO_THREADS thread counts in KvikIO's sweep (default "16 32 64"; 1 is its defaults row)
#   WORK           scratch folder for the object (default: a temp folder, removed after)
# Usage: bench/remote_bench.sh        (or SIZE=1G bench/remote_bench.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-8G}; SPLIT=${SPLIT:-16}; REPEAT=${REPEAT:-3}; BUILD=${BUILD:-build}; PYTHON=${PYTHON:-python3}
KVIKIO_THREADS=${KVIKIO_THREADS:-"16 32 64"}

nginx_bin=/usr/sbin/nginx
if [ -n "${NGINX_ROOT:-}" ]; then
  nginx_bin="$NGINX_ROOT/usr/sbin/nginx"
  export LD_LIBRARY_PATH="$NGINX_ROOT/usr/lib/x86_64-linux-gnu:$NGINX_ROOT/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -x "$nginx_bin" ] || { echo "remote_bench: no nginx at $nginx_bin (set NGINX_ROOT)" >&2; exit 2; }
command -v curl >/dev/null || { echo "remote_bench: curl is needed for the ceiling" >&2; exit 2; }

own_work=0
if [ -z "${WORK:-}" ]; then WORK=$(mktemp -d /tmp/ferry-remote-bench-XXXXXX); own_work=1; fi
mkdir -p "$WORK/www" "$WORK/prefix/logs"
chmod 755 "$WORK" "$WORK/www"  # nginx workers run as an unprivileged user when started as root
nginx_pid=""
cleanup() {
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null || true
  [ "$own_work" = 1 ] && rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

bytes=$($PYTHON -c "import sys; s=sys.argv[1].upper().rstrip('IB'); m={'K':1<<10,'M':1<<20,'G':1<<30,'T':1<<40}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$SIZE")
obj="$WORK/www/object.bin"
if [ ! -f "$obj" ] || [ "$(stat -c %s "$obj")" != "$bytes" ]; then
  echo "remote_bench: writing a $SIZE object"
  $PYTHON - "$obj" "$bytes" <<'PY'
import os, sys
path, n = sys.argv[1], int(sys.argv[2])
block = os.urandom(64 << 20)
with open(path, "wb") as f:
    left = n
    while left:
        k = min(left, len(block)); f.write(block[:k]); left -= k
PY
fi
chmod 644 "$obj"
cat "$obj" > /dev/null  # into the page cache: the bench measures the network path, not the disk

port=$($PYTHON -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
workers=$(( $(nproc) < 16 ? $(nproc) : 16 ))
# Started as root, nginx runs its workers as nobody, who cannot reach a work folder under /root.
user_line=""
[ "$(id -u)" = 0 ] && user_line="user root;"
cat > "$WORK/prefix/nginx.conf" <<CONF
daemon off;
$user_line
worker_processes $workers;
error_log $WORK/prefix/logs/error.log warn;
pid $WORK/prefix/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  sendfile_max_chunk 4m;
  client_body_temp_path $WORK/prefix/body; proxy_temp_path $WORK/prefix/proxy;
  fastcgi_temp_path $WORK/prefix/fcgi; uwsgi_temp_path $WORK/prefix/uwsgi; scgi_temp_path $WORK/prefix/scgi;
  server { listen 127.0.0.1:$port; root $WORK/www; location / { } }
}
CONF
"$nginx_bin" -p "$WORK/prefix" -e "$WORK/prefix/logs/error.log" -c "$WORK/prefix/nginx.conf" &
nginx_pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
url="http://127.0.0.1:$port/object.bin"
curl -sfI "$url" >/dev/null || { echo "remote_bench: nginx did not start; see $WORK/prefix/logs/error.log" >&2; exit 1; }

now() { date +%s.%N; }
rate() { $PYTHON -c "import sys; print('%.2f' % (int(sys.argv[1]) / float(sys.argv[2]) / 1e9))" "$1" "$2"; }
best() { $PYTHON -c "import sys; print(max(float(x) for x in sys.argv[1:]))" "$@"; }

# curl ceiling: SPLIT ranges at once, each its own connection.
curl_runs=()
for _ in $(seq "$REPEAT"); do
  t0=$(now); pids=()
  chunk=$(( (bytes + SPLIT - 1) / SPLIT ))
  for i in $(seq 0 $((SPLIT - 1))); do
    a=$(( i * chunk )); b=$(( a + chunk - 1 )); [ $b -ge $bytes ] && b=$(( bytes - 1 ))
    [ $a -lt $bytes ] || continue
    curl -s -r "$a-$b" -o /dev/null "$url" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(now)
  curl_runs+=("$(rate "$bytes" "$($PYTHON -c "print($t1 - $t0)")")")
done
curl_gbps=$(best "${curl_runs[@]}")
echo "curl x$SPLIT: ${curl_runs[*]} GB/s"

ferry_gbps=""; raw_gbps=""
if [ -x "$BUILD/bench/ferry_remote_bench" ]; then
  out=$("$BUILD/bench/ferry_remote_bench" "$url" --repeat "$REPEAT" ${FERRY_BENCH_ARGS:-}) || true
  echo "$out"
  ferry_gbps=$(echo "$out" | sed -n 's/.*best_GBps=\([0-9.]*\).*/\1/p')
  ferry_device=$(echo "$out" | sed -n 's/.*device=\([a-z]*\).*/\1/p')
  out=$("$BUILD/bench/ferry_remote_bench" "$url" --repeat "$REPEAT" --raw ${FERRY_BENCH_ARGS:-}) || true
  echo "$out"
  raw_gbps=$(echo "$out" | sed -n 's/.*best_GBps=\([0-9.]*\).*/\1/p')
else
  echo "remote_bench: $BUILD/bench/ferry_remote_bench missing (make build)" >&2
fi

cli_gbps=""
if [ -x "$BUILD/tools/ferry" ]; then
  runs=()
  for _ in $(seq "$REPEAT"); do
    if out=$("$BUILD/tools/ferry" load "$url" --json 2>/dev/null); then
      r=$(echo "$out" | $PYTHON -c "import json,sys; d=json.load(sys.stdin); print(d.get('gbps') or d.get('GBps') or d.get('rate_gbps') or '')" 2>/dev/null || true)
      [ -n "$r" ] && runs+=("$r")
    fi
  done
  [ ${#runs[@]} -gt 0 ] && cli_gbps=$(best "${runs[@]}") && echo "ferry load (CLI): ${runs[*]} GB/s"
fi

# KvikIO's RemoteFile at its defaults and over its documented knobs (threads x task size x bounce
# buffer size, bench/peer_configs.py's grid, KVIKIO_THREADS giving the thread counts), each
# configuration in a fresh process started with KvikIO's environment variables, best of REPEAT.
kvikio_gbps=""; kvikio_cfg=""; kvikio_default=""
if $PYTHON -c "import kvikio, cupy" 2>/dev/null; then
  out=$($PYTHON - "$url" "$bytes" "$REPEAT" "$KVIKIO_THREADS" <<'PY' || true
import os, subprocess, sys
sys.path.insert(0, "bench")
import peer_configs as pc
url, n, repeat, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
one = r"""
import sys, time, cupy, kvikio
url, n, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = cupy.empty(n, dtype=cupy.uint8)
best = 0.0
for _ in range(repeat):
    f = kvikio.RemoteFile.open_http(url)
    t0 = time.perf_counter(); f.read(buf); cupy.cuda.runtime.deviceSynchronize()
    best = max(best, n / (time.perf_counter() - t0) / 1e9)
    f.close()
print("%.3f" % best)
"""
def run(cfg):
    r = subprocess.run([sys.executable, "-c", one, url, str(n), str(repeat)],
                       env=pc.kvikio_environment(cfg), capture_output=True, text=True, timeout=600)
    if r.returncode:
        return {"skipped": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    return {"seconds": n / 1e9 / float(r.stdout.split()[-1]), "gbps": float(r.stdout.split()[-1])}
rows = pc.sweep([{}] + pc.kvikio_grid(threads=tuple(int(t) for t in threads if int(t) > 1)), run)
for row in rows:
    print("kvikio %s: %s" % (row["label"], "%.2f GB/s" % row["gbps"] if "gbps" in row else
                             "failed: " + row["failed"]), file=sys.stderr)
print("DEFAULT %s" % ("%.3f" % rows[0]["gbps"] if "gbps" in rows[0] else ""))
top = pc.best_of(rows[1:])
if top:
    print("RESULT %.3f %s" % (top["gbps"], top["label"]))
PY
)
  kvikio_default=$(echo "$out" | awk '/^DEFAULT/ {print $2}')
  kvikio_gbps=$(echo "$out" | awk '/^RESULT/ {print $2}')
  kvikio_cfg=$(echo "$out" | sed -n 's/^RESULT [0-9.]* //p')
else
  echo "remote_bench: kvikio/cupy not importable: KvikIO skipped" >&2
fi

ratio() { [ -n "$1" ] && [ -n "$2" ] && $PYTHON -c "import sys; print('%.2fx' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2" || echo "-"; }
echo
echo "object: $SIZE over http://127.0.0.1 (nginx, $workers workers), best of $REPEAT"
printf '%-34s %8s %12s %12s\n' reader GB/s "vs curl" "vs KvikIO"
printf '%-34s %8s %12s %12s\n' "curl, $SPLIT ranged GETs -> /dev/null" "$curl_gbps" "1.00x" "$(ratio "$curl_gbps" "$kvikio_gbps")"
printf '%-34s %8s %12s %12s\n' "ferry::file -> ${ferry_device:-?} (engine)" "${ferry_gbps:--}" "$(ratio "$ferry_gbps" "$curl_gbps")" "$(ratio "$ferry_gbps" "$kvikio_gbps")"
printf '%-34s %8s %12s %12s\n' "ferry http source, raw loop" "${raw_gbps:--}" "$(ratio "$raw_gbps" "$curl_gbps")" "$(ratio "$raw_gbps" "$kvikio_gbps")"
[ -n "$cli_gbps" ] && printf '%-34s %8s %12s %12s\n' "ferry load (CLI)" "$cli_gbps" "$(ratio "$cli_gbps" "$curl_gbps")" "$(ratio "$cli_gbps" "$kvikio_gbps")"
printf '%-34s %8s %12s %12s\n' "KvikIO RemoteFile, its defaults" "${kvikio_default:--}" "$(ratio "$kvikio_default" "$curl_gbps")" "$(ratio "$kvikio_default" "$kvikio_gbps")"
printf '%-34s %8s %12s %12s\n' "KvikIO RemoteFile, its best" "${kvikio_gbps:--}" "$(ratio "$kvikio_gbps" "$curl_gbps")" "1.00x"
[ -n "$kvikio_cfg" ] && echo "KvikIO's best: $kvikio_cfg (of bench/peer_configs.py's grid, each in a fresh process)"
echo "bars: ferry >= 0.90x curl, >= 2.00x KvikIO"
