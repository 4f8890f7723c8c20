#!/usr/bin/env bash
# Builds ferry, runs every test and measures it on a GPU machine, in one go, and ends with a
# short table. Logs go to $OUT (or ./gpu-check-out). Needs the .deps/ bundle on machines
# without network (scripts/deps.sh --bundle).
#   scripts/gpu-check.sh [all|test|bench|hot|peers|sidebyside|ab|sanitize|into] [bench size, default 8G]
#     (BUILD_TARGETS: build only these ninja targets)
#     hot: only the hot-read sweep of `ferry bench`; peers: the side-by-side benchmarks of
#     checkpoints, Zarr and remote objects against the peers importable there (carry their
#     wheels; NGINX_ROOT names unpacked nginx .debs); sidebyside: bench/peers_bench.py (ferry,
#     every importable peer and the ceilings on the same files, hot, cold, durable writes;
#     SIDEBYSIDE_ARGS adds options) and a ferry bench thread sweep, tables, JSON and PNGs in
#     $OUT; ab: bench/probes/engine_ab.sh against the
#     engine source tree in BEFORE_SRC (a plain folder); sanitize: the test binary under
#     compute-sanitizer's memcheck, racecheck and initcheck side by side (SANITIZE_TOOLS to
#     pick, SANITIZE_TIMEOUT seconds each, SANITIZE_FILTER_<tool> for a gtest filter); into:
#     the benchmarks of loads into GPU memory added last (many small files, an MoE-shaped
#     checkpoint, DCP saves and loads, checksums), each bounded by INTO_TIMEOUT seconds
#     (default 150) at INTO_SIZE (default 4G; DCP_SIZE for the DCP run alone); INTO_ONLY names the runs to make (many_files,
#     many_files_host, moe, dcp, integrity, integrity_cli); wheels: the binary wheels in dist/
#     (WHEELS, default every abi3 wheel there) as users install them, each into a fresh virtual
#     environment: the Python suite against it (WHEEL_SUITE=0 skips it), and `ferry.fromfile`
#     of a hot file of the bench size into GPU memory from the source build and from each
#     wheel in turn (WHEEL_FROMFILE=0 skips it and the build)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
size=${2:-8G}
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=build-gpu
summary=()
note() { summary+=("$1"); echo "== $1"; }

echo "== machine"; nvidia-smi -L; nproc; free -g | head -2; uname -r
nvcc --version | tail -1

t0=$(date +%s)
targets=(); case "$what" in sidebyside|into|wheels) targets=(ferry_cli ferry_python) ;; esac  # what those modes run, no tests
# shellcheck disable=SC2206
[ -n "${BUILD_TARGETS:-}" ] && targets=($BUILD_TARGETS)  # e.g. "ferry_cli ferry_python" for PEERS=checkpoint
if [ "$what" = wheels ] && [ "${WHEEL_FROMFILE:-1}" = 0 ]; then
  note "build: none (the wheels alone)"
else
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/tmp/configure.log 2>&1 \
    || { tail -30 /tmp/configure.log; exit 1; }
  ninja -C $build "${targets[@]}" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
  note "build: $(( $(date +%s) - t0 )) s"
fi
ferry=$build/tools/ferry

# Work on the root file system (ext4 on the virtio disk), not tmpfs.
export TMPDIR=/root/ferry-tmp; mkdir -p $TMPDIR

# cuFile needs the udev properties of the disk to register a file; this machine has no udev
# database. Test harness only: describe the disk the way udev would, so that cuFile's
# compatibility mode can be exercised. (Never done by ferry itself.)
udev_dev() { python3 -c "import os,sys; s=os.stat(sys.argv[1]).st_dev; print(f'{os.major(s)}:{os.minor(s)}')" "$TMPDIR"; }
udev_fix() {
  local dev; dev=$(udev_dev)
  mkdir -p /run/udev/data
  printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\nE:FERRY_TEST_HARNESS=1\n' >/run/udev/data/b$dev
  echo "udev data written for block device $dev"
}
# The side-by-side runs see the machine as a user has it: with the record above, cuFile serves
# the disk, and KvikIO's reads went through cuFile at 1-2 GB/s instead of its 40. Only a record
# this script wrote is removed.
udev_clear() {
  local f; f=/run/udev/data/b$(udev_dev)
  if grep -qs '^E:FERRY_TEST_HARNESS=1$' "$f"; then rm -f "$f"; echo "udev data of the tests removed"; fi
}

if [ "$what" = all ] || [ "$what" = test ]; then
  $ferry doctor "$TMPDIR" >"$out/doctor.txt" 2>&1; echo "doctor rc $?" >>"$out/doctor.txt"
  udev_fix
  (cd $build && ctest --output-on-failure -j4 --timeout 600 -E python.pytest) >"$out/ctest.log" 2>&1
  rc=$?
  note "ctest: rc $rc, $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
  note "ctest skipped: $(grep -c '(Skipped)' "$out/ctest.log" || true)"
  grep -E '\(Skipped\)|\*\*\*Failed|Failed  ' "$out/ctest.log" | head -20
  grep -B2 -A12 '\*\*\*Failed' "$out/ctest.log" | grep -E 'Failure|error|Expected|Which is|\.cpp:' | head -30
  # ctest keeps the output of failing tests only: the reliability figures come from a direct run.
  $build/tests/ferry_tests --gtest_filter='*fault_injection*:staging_reuse.*' 2>&1 \
    | sed -nE 's/.* ([0-9]+) fault-injected runs: ([0-9]+) succeeded \(([0-9]+) absorbed.*, ([0-9]+) typed errors/F \1 \2 \3 \4/p; s/.*figures  \] (.*staged transfers.*)/T \1/p' \
    | awk '$1 == "F" { r += $2; s += $3; a += $4; t += $5 } $1 == "T" { sub(/^T /, ""); print }
           END { printf "fault loops (host and GPU): %d runs, %d succeeded (%d absorbed a persistent fault), %d typed errors\n", r, s, a, t }' \
    | while read -r line; do note "$line"; done
  if [ -d python/tests ] && [ "${TEST_PYTHON:-1}" = 1 ]; then  # TEST_PYTHON=0: the C++ suite alone
    FERRY_CLI=$PWD/$build/tools/ferry PYTHONUNBUFFERED=1 scripts/test-python.sh $build -rs >"$out/pytest.log" 2>&1
    note "pytest: rc $?, $(tail -1 "$out/pytest.log")"
    grep -E "SKIPPED|FAILED|Error" "$out/pytest.log" | head -20
  fi
fi

if [ "$what" = sanitize ]; then
  udev_fix
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # Tests that fork, kill processes or only exercise host code stay with the plain run: a
  # forked child may not touch the parent's CUDA context. Child processes (the CLI tests) run
  # uninstrumented: the library code they run is the same, checked here in-process.
  host_only="fork_during_io.*:crash_safe_write*:thread_pool_stress*:fault_injection.*:settings_regression*:cli_*:Cli*:file.gds_on_without_cufile*:python_crosscheck*"
  # The tools run side by side, each over the whole filtered suite in its own process: the GPU
  # and the 16 cores have room for three, and one call then covers all of them.
  sanitize_one() {  # sanitize_one TOOL: its log in $out, its exit status and seconds in $TMPDIR
    local tool=$1 extra=() var="SANITIZE_FILTER_$1" filter
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    filter=${!var:--$host_only}
    local t1; t1=$(date +%s)
    TMPDIR=$TMPDIR/$tool timeout "${SANITIZE_TIMEOUT:-300}" "$cs" --tool "$tool" "${extra[@]}" \
      --target-processes application-only --print-limit 100 \
      $build/tests/ferry_tests --gtest_filter="$filter" >"$out/sanitizer-$tool.log" 2>&1
    echo "$? $(( $(date +%s) - t1 ))" >"$TMPDIR/sanitizer-$tool.rc"
  }
  tools=${SANITIZE_TOOLS:-memcheck racecheck initcheck}
  for tool in $tools; do mkdir -p "$TMPDIR/$tool"; sanitize_one "$tool" & done
  wait
  for tool in $tools; do
    read -r rc secs <"$TMPDIR/sanitizer-$tool.rc"
    # Each report is a block that starts with an unindented "=========" line; attribute it to
    # libcufile when its backtrace runs through it.
    counts=$(awk '/^========= [A-Z]/ && !/SUMMARY|COMPUTE-SANITIZER/ { n++; cur=n } /^========= *$/ { cur=0 }
                  cur && /libcufile/ { cf[cur]=1 }
                  END { c=0; for (k in cf) c++; printf "%d reports, %d of them inside libcufile", n, c }' \
             "$out/sanitizer-$tool.log")
    note "compute-sanitizer $tool: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -1 | sed 's/=* *//'); $counts; $(grep -cE '^\[       OK' "$out/sanitizer-$tool.log") tests passed, $(grep -cE '^\[  SKIPPED \]' "$out/sanitizer-$tool.log") skipped, $(grep -cE '^\[  FAILED  \].*ms\)' "$out/sanitizer-$tool.log") failed; $secs s"
    grep -E "^========= [A-Z]" "$out/sanitizer-$tool.log" | grep -v SUMMARY | sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | head -10
    grep -E "^\[ RUN" "$out/sanitizer-$tool.log" | tail -1
  done
fi

if [ "$what" = hot ]; then
  udev_fix >/dev/null
  f=$TMPDIR/bench.bin
  python3 scripts/make_bench_file.py "$f" "$size"
  echo "\$ ferry bench $f ${BENCH_SWEEP:---threads 16 --task-size 32M --paths staged} --repeat 3" | tee -a "$out/bench.txt"
  $ferry bench "$f" ${BENCH_SWEEP:---threads 16 --task-size 32M --paths staged} --repeat 3 | tee -a "$out/bench.txt"
  rm -f "$f"
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  udev_fix >/dev/null
  log="$out/bench.txt"
  if [ "${SKIP_FERRY_BENCH:-0}" != 1 ]; then
    f=$TMPDIR/bench.bin
    python3 scripts/make_bench_file.py "$f" "$size"
    note "bench file: $f ($size)"
    echo "\$ ferry bench $f ${BENCH_SWEEP:---threads 16 --task-size 16M,32M,64M --paths staged,staged+direct,cufile} --repeat 3" | tee -a "$log"
    $ferry bench "$f" ${BENCH_SWEEP:---threads 16 --task-size 16M,32M,64M --paths staged,staged+direct,cufile} \
      --repeat 3 | tee -a "$log"
    echo "\$ ferry bench $f --threads 16 --task-size 32M --paths staged --repeat 2 --write --no-naive" | tee -a "$log"
    $ferry bench "$f" --threads 16 --task-size 32M --paths staged --repeat 2 --write --no-naive | tee -a "$log"
    echo "\$ ferry bench $f --threads 16 --task-size 32M --paths staged,staged+direct --repeat 2 --cold --no-naive" | tee -a "$log"
    $ferry bench "$f" --threads 16 --task-size 32M --paths staged,staged+direct --repeat 2 --cold --no-naive \
      | tee -a "$log"
    rm -f "$f"
  fi
  echo "\$ ferry_kernel_bandwidth 2048" | tee -a "$log"
  $build/bench/ferry_kernel_bandwidth 2048 | tee -a "$log"
  echo "\$ python3 bench/formats_bench.py ferry DIR 4" | tee -a "$log"
  python3 bench/formats_bench.py $ferry $TMPDIR/formats 4 --json "$out/formats.json" | tee -a "$log"
  if [ -f python/bench/bench_python.py ]; then
    echo "\$ python3 python/bench/bench_python.py --size $size --st-size 4G" | tee -a "$log"
    PYTHONPATH=$PWD/$build/python python3 python/bench/bench_python.py --dir $TMPDIR --size $size --st-size 4G \
      --json "$out/python-bench.json" 2>&1 | grep -v '^ *[\[{}"]' | tee -a "$log"
  fi
fi

if [ "$what" = peers ]; then
  udev_clear
  export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}
  peer() {  # peer NAME COMMAND...: its output in $out/NAME.txt, its table on stdout
    local name=$1; shift
    echo "\$ $*" | tee "$out/$name.txt"
    local t1; t1=$(date +%s)
    PYTHONUNBUFFERED=1 timeout "${PEER_TIMEOUT:-400}" "$@" >>"$out/$name.txt" 2>&1
    local rc=$?
    grep -E '^\|' "$out/$name.txt"
    note "$name: rc $rc, $(( $(date +%s) - t1 )) s"
  }
  for p in ${PEERS:-checkpoint zarr remote}; do
    case $p in
      checkpoint) peer checkpoint python3 bench/checkpoint_bench.py --dir $TMPDIR/ckpt --size "${CKPT_SIZE:-4.6G}" \
                    --repeat "${CKPT_REPEAT:-3}" --json "$out/checkpoint.json" ${CKPT_ARGS:-} ;;
      zarr) peer zarr python3 bench/zarr_bench.py --dir $TMPDIR/zarr --size "${ZARR_SIZE:-4G}" --json "$out/zarr.json" ;;
      remote) peer remote env BUILD=$build SIZE="${REMOTE_SIZE:-8G}" WORK=$TMPDIR/remote bench/remote_bench.sh ;;
    esac
  done
fi

if [ "$what" = sidebyside ]; then
  udev_clear
  export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}
  log="$out/sidebyside.txt"
  echo "\$ python3 bench/peers_bench.py --size $size ${SIDEBYSIDE_ARGS:-}" | tee "$log"
  t1=$(date +%s)
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout "${SIDEBYSIDE_TIMEOUT:-540}" python3 bench/peers_bench.py --dir $TMPDIR/peers \
    --size "$size" --ferry $ferry --json "$out/sidebyside.json" --plot "$out/sidebyside.png" ${SIDEBYSIDE_ARGS:-} \
    >>"$log" 2>&1
  note "side by side: rc $?, $(( $(date +%s) - t1 )) s"
  grep -E '^\||^##' "$log"
  f=$TMPDIR/peers/peers-bench.raw
  if [ -f "$f" ]; then
    if $ferry bench "$f" --threads 4,8,16 --task-size 32M --paths staged,stream --repeat 2 --no-naive --json \
      >"$out/bench-threads.json" 2>>"$log"; then
      python3 bench/plot_bench.py "$out/bench-threads.json" -o "$out/bench-threads.png"
    else
      rm -f "$out/bench-threads.json"; note "ferry bench thread sweep failed (see sidebyside.txt)"
    fi
  fi
fi

if [ "$what" = ab ]; then
  udev_fix >/dev/null
  [ -d "${BEFORE_SRC:-}" ] || { echo "ab: BEFORE_SRC must name the source tree of the engine to compare with" >&2; exit 2; }
  echo "\$ bench/probes/engine_ab.sh $BEFORE_SRC" | tee "$out/engine_ab.txt"
  timeout "${AB_TIMEOUT:-500}" bench/probes/engine_ab.sh "$BEFORE_SRC" >>"$out/engine_ab.txt" 2>&1
  note "engine A/B: rc $?"
  tail -5 "$out/engine_ab.txt"
fi

if [ "$what" = into ]; then
  export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}"
  into_size=${INTO_SIZE:-4G}
  limit=${INTO_TIMEOUT:-150}
  runs=(
    "many_files|bench/many_files_bench.py --dir $TMPDIR/many-files --files 20000 --rounds 2 --device cuda"
    "many_files_host|bench/many_files_bench.py --dir $TMPDIR/many-files --files 20000 --rounds 2"
    "moe|bench/many_tensors_bench.py --dir $TMPDIR/many-tensors --tensors 50000 --moe --matrices 64 --device cuda --rounds 3"
    "dcp|bench/dcp_bench.py --dir $TMPDIR/dcp --size ${DCP_SIZE:-$into_size} --tensors 512 --device cuda --rounds 2 ${DCP_ARGS:-}"
    "integrity|bench/integrity_bench.py --dir $TMPDIR/integrity --size $into_size --tensors 600 --device cuda --rounds ${INTEGRITY_ROUNDS:-5} --cli $ferry"
    "integrity_cli|bench/integrity_cli_bench.py --dir $TMPDIR/integrity-cli --size $into_size --tensors 600 --device cuda --rounds ${INTEGRITY_ROUNDS:-3} --cli $ferry"
  )
  for r in "${runs[@]}"; do
    name=${r%%|*}; cmd=${r#*|}
    # INTO_ONLY="moe integrity": only those runs.
    [ -n "${INTO_ONLY:-}" ] && [[ " $INTO_ONLY " != *" $name "* ]] && continue
    echo "\$ python3 $cmd" | tee "$out/$name.txt"
    timeout "$limit" python3 $cmd >>"$out/$name.txt" 2>&1
    note "$name: rc $?"
    grep -E '^\|' "$out/$name.txt" | tail -12
  done
fi

if [ "$what" = wheels ]; then
  shopt -s nullglob
  # shellcheck disable=SC2206
  wheels=(${WHEELS:-dist/ferry_cu*-abi3-*.whl})
  [ ${#wheels[@]} -gt 0 ] || { echo "wheels: no wheel in dist/ (make wheel, then carry dist)" >&2; exit 2; }
  udev_fix >/dev/null
  repo=$PWD
  venvs=()
  for wheel in "${wheels[@]}"; do
    name=$(basename "$wheel" | cut -d- -f1)
    venv=$TMPDIR/venv-$name; rm -rf "$venv"
    # The machine's numpy, torch, CuPy, pytest... come from the folders of packages its python3
    # sees (user site and PYTHONPATH's folders included, e.g. the test servers' packages), named
    # in a .pth file after the venv's own; ferry only from the wheel.
    python3 -m venv "$venv"
    site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    python3 -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))" \
      >"$site/ferry-test-extra.pth"
    tr ':' '\n' <<<"${PYTHONPATH:-}" | grep -v "^$" >>"$site/ferry-test-extra.pth" || true
    t1=$(date +%s%N)
    env -u PYTHONPATH PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
      "$venv/bin/python" -m pip install -q --no-index --no-deps --only-binary=:all: "$wheel" || exit 1
    note "$name: installed in $(( ($(date +%s%N) - t1) / 1000000 )) ms from $(basename "$wheel")"
    (cd "$TMPDIR" && env -u PYTHONPATH "$venv/bin/ferry" doctor "$TMPDIR") >"$out/doctor-$name.txt" 2>&1
    note "$name: ferry doctor rc $?: $(head -3 "$out/doctor-$name.txt" | tr '\n' ' ')"
    venvs+=("$name|$venv")
    if [ "${WHEEL_SUITE:-1}" = 1 ]; then
      t1=$(date +%s)
      (cd "$TMPDIR" && env -u PYTHONPATH FERRY_CLI="$venv/bin/ferry" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests" ${WHEEL_PYTEST_ARGS:-}) >"$out/pytest-$name.log" 2>&1
      note "$name: pytest rc $?, $(tail -1 "$out/pytest-$name.log"), $(( $(date +%s) - t1 )) s"
      grep -E "SKIPPED|FAILED|Error" "$out/pytest-$name.log" | head -20
    fi
  done
  if [ "${WHEEL_FROMFILE:-1}" = 1 ]; then
    f=$TMPDIR/fromfile.bin
    python3 scripts/make_bench_file.py "$f" "$size"
    log=$out/fromfile.txt; : >"$log"
    # Readers take turns, three times over: each sees the same hot file.
    for turn in 1 2 3; do
      PYTHONPATH="$PWD/$build/python" python3 bench/probes/fromfile_probe.py "$f" --label source >>"$log" 2>&1
      for v in "${venvs[@]}"; do
        (cd "$TMPDIR" && env -u PYTHONPATH "${v#*|}/bin/python" "$repo/bench/probes/fromfile_probe.py" "$f" \
          --label "${v%%|*}") >>"$log" 2>&1
      done
    done
    rm -f "$f"
    python3 - "$log" <<'PY' | while read -r line; do note "$line"; done
import json, sys
best = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        print("fromfile: " + line.strip()); continue
    best.setdefault(r["label"], []).append(r["best"])
src = max(best.get("source", [0]))
for label, rates in best.items():
    ratio = " (%.3fx the source build)" % (max(rates) / src) if src and label != "source" else ""
    print("fromfile %s: best %.2f GB/s, turns %s%s" % (label, max(rates), rates, ratio))
PY
  fi
fi

echo; echo "== summary"; printf '%s\n' "${summary[@]}"
