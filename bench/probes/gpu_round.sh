#!/usr/bin/env bash
# One GPU call: build, the tests of what changed, then the probes and benchmarks named in
# ROUND (default: files moe many_files; the cases below); PYTESTS names the tests, PYTEST_TIMEOUT (200 s) bounds
# them. Output in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-round-out}; mkdir -p "$out"
export TMPDIR=/root/ferry-tmp; mkdir -p $TMPDIR
targets="ferry_cli ferry_python ferry_tests"
[[ " ${ROUND:-} " == *" remote "* ]] && targets="$targets ferry_remote_bench"
INTO_ONLY=none BUILD_TARGETS="$targets" scripts/gpu-check.sh into >"$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
grep "build:" "$out/build.txt"
export PYTHONPATH=$PWD/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}
# The peers' wheels where they came along (.whl-bench/, filled by bench/fetch_peers.sh where
# there is network, installed here without it).
if compgen -G ".whl-bench/*.whl" >/dev/null; then
  python3 -m pip install -q --no-deps --target /tmp/peer-site .whl-bench/*.whl >"$out/peer-install.txt" 2>&1 \
    || tail -3 "$out/peer-install.txt"
  export PYTHONPATH=$PYTHONPATH:/tmp/peer-site
fi
# The test servers where they came along: nginx unpacked from Debian's packages (.nginx/), moto's
# S3 server and its modules (.site/site.tar.xz, for the tests' own processes only); then a
# missing server fails its test instead of skipping it.
servers=()
if [ -x .nginx/usr/sbin/nginx ] && [ -f .site/site.tar.xz ]; then
  mkdir -p /root/test-site && tar xJf .site/site.tar.xz -C /root/test-site
  servers=(env NGINX_ROOT=$PWD/.nginx FERRY_REQUIRE_SERVERS=1 PYTHONPATH=$PYTHONPATH:/root/test-site)
fi
"${servers[@]}" build-gpu/tests/ferry_tests --gtest_filter="${GTEST:-read_whole_files*:to_native_c_many*:load_many*:checksum*}" 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran"
timeout ${PYTEST_TIMEOUT:-200} python3 -X faulthandler -m pytest -q -rs ${PYTESTS:-python/tests/test_load_many.py} >"$out/pytest.txt" 2>&1
grep -E "^(FAILED|ERROR)|^E  |passed|failed|Fatal" "$out/pytest.txt" | tail -15
for r in ${ROUND:-files moe many_files}; do
  case $r in
    files) timeout 240 python3 bench/probes/files_probe.py --dir $TMPDIR/mf --files 20000 --device cuda --rounds 3 --native ;;
    moe) timeout 200 python3 bench/probes/moe_probe.py --dir $TMPDIR/moe --device cuda --rounds 5 ;;
    # Where the MoE load's wrapping goes, and the load with fewer I/O threads.
    wrap) timeout 150 python3 bench/probes/wrap_probe.py --dir $TMPDIR/moe --device cuda --rounds 5 --threads ${WRAP_THREADS:-8,12} ;;
    # Issue 39's table on the same checkpoint, InstantTensor swept where its wheel came along.
    moe_bench)
      timeout 420 python3 bench/many_tensors_bench.py --dir $TMPDIR/moe \
        --tensors 50000 --moe --matrices 64 --device cuda --rounds ${MOE_ROUNDS:-3} --json "$out/moe_bench.json" ;;
    many_files) timeout 240 python3 bench/many_files_bench.py --dir $TMPDIR/mf --files 20000 --rounds 2 --device cuda | tail -9 ;;
    # 100,000 files, one round: each reader's first call, as a training job's first epoch meets them.
    many100k) timeout 420 python3 bench/many_files_bench.py --dir $TMPDIR/mf100k --files 100000 --rounds 1 --device cuda | tail -9 ;;
    # Issue 36's loads: DCP into GPU tensors, hot (ferry's reader with and without its checks and
    # reading ahead) and cold (the files out of the page cache before each load).
    dcp) timeout 400 python3 bench/dcp_bench.py --dir $TMPDIR/dcp --size ${DCP_SIZE:-8G} --tensors 512 --device cuda \
        --rounds 2 --only ${DCP_PARTS:-load,cold} --json "$out/dcp.json" | tail -14 ;;
    # Issue 36's saves: each writer at each thread_count, the disk's ceiling into 1 and 16 files.
    dcp_save) timeout 300 python3 bench/dcp_bench.py --dir $TMPDIR/dcps --size ${DCP_SAVE_SIZE:-2G} --tensors 512 --device cuda \
        --rounds 2 --threads 1,4,16 --only save --json "$out/dcp_save.json" | tail -16 ;;
    # Where ferry.dcp's read_data spends its time per item (cProfile).
    dcp_read) timeout 200 python3 bench/probes/dcp_read_probe.py --size ${DCP_READ_SIZE:-512M} --tensors 512 --device cuda --top 30 ;;
    # Issue 33's side-by-side runs, each peer swept in the same run: a sharded checkpoint, KvikIO
    # on a raw file, Zarr, HTTP over loopback (nginx from .nginx/, also bench/fetch_peers.sh's).
    ckpt_peers) timeout ${CKPT_TIMEOUT:-400} python3 bench/checkpoint_bench.py --dir $TMPDIR/ckpt --size ${CKPT_SIZE:-4.6G} \
        --repeat 3 --json "$out/checkpoint.json" ${CKPT_ARGS:-} | grep -E '^\||^#' ;;
    kvikio) timeout ${KVIKIO_TIMEOUT:-400} python3 bench/peers_bench.py --dir $TMPDIR/peers --size ${RAW_SIZE:-8G} \
        --ferry build-gpu/tools/ferry --json "$out/peers.json" --skip-write --skip-cold --skip-ferry-bench --npy-size 0 \
        --st-size 0 --only ferry.fromfile,ferry.cli.raw,kvikio.default,kvikio.best,ceiling.copy | grep -E '^\||^#' ;;
    zarr) timeout ${ZARR_TIMEOUT:-400} python3 bench/zarr_bench.py --dir $TMPDIR/zarr --size ${ZARR_SIZE:-4G} \
        --json "$out/zarr.json" ${ZARR_ARGS:-} ;;
    remote) NGINX_ROOT=$PWD/.nginx BUILD=build-gpu SIZE=${REMOTE_SIZE:-8G} WORK=$TMPDIR/remote \
        timeout ${REMOTE_TIMEOUT:-300} bench/remote_bench.sh ;;
    many_host) timeout 240 python3 bench/many_files_bench.py --dir $TMPDIR/mf --files 20000 --rounds 2 | tail -9 ;;
  esac 2>&1 | tee "$out/$r.txt"
done
