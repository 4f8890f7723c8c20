# ferry: the commands the README gives. Each installs what it needs first (scripts/deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
# Line tables only (-g1: backtraces and profiles keep files and lines): full debug information
# made each compile 30-45% slower. CXX_FLAGS="-O2 -g -DNDEBUG" for a debugger's view.
CXX_FLAGS ?= -O2 -g1 -DNDEBUG
CMAKE_FLAGS ?=
PYTHON ?= python3

.PHONY: all deps configure build test test-python demo bench gpu-check sanitize fuzz install clean wheel

all: build

deps:
	@scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(CXX_FLAGS)" -DFERRY_BUILD_TESTS=ON $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Every test: the C++ suite (GoogleTest) and the Python package's tests (python.pytest), under
# CTest.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1200

test-python: build
	@scripts/test-python.sh $(BUILD)

# The main job on built-in sample data: on the GPU when there is one, else in host memory.
# Installs and builds only what the demo runs (the library and the CLI), not the tests or the
# Python module. A build directory it configures first has no tests (GoogleTest is not installed
# for the demo); `make test` turns them on.
demo:
	@scripts/deps.sh --demo
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(CXX_FLAGS)" \
	  $(if $(wildcard $(BUILD)/CMakeCache.txt),,-DFERRY_BUILD_TESTS=OFF) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target ferry_cli
	@scripts/demo.sh $(BUILD)

# The performance harness on a generated file (SIZE=8G for the figures in docs/benchmarks.md).
SIZE ?= 1G
bench: build
	@$(BUILD)/tools/ferry bench --size $(SIZE)

# The binary wheels into dist/ (scripts/wheel.py): ferry-cu13 from the build tree and
# ferry-cu12 from libferry built again in $(BUILD)/cu12 with the CUDA 12 toolkit
# (scripts/cuda12.sh fetches one into .cuda12/ where none is installed), each manylinux with the
# CLI inside, for each Python of WHEEL_PYTHONS (3.12 and later: one abi3 wheel). Only the
# extension is compiled again per Python.
WHEEL_PYTHONS ?= 3.9 3.10 3.11 3.12
wheel: build
	@JOBS=$(JOBS) $(PYTHON) scripts/wheel.py --build $(BUILD) --out dist --python $(WHEEL_PYTHONS)
	@JOBS=$(JOBS) $(PYTHON) scripts/wheel.py --build $(BUILD) --out dist --python $(WHEEL_PYTHONS) --cuda 12

# On a GPU machine (no network needed once `scripts/deps.sh --bundle` filled .deps/).
gpu-check:
	@scripts/gpu-check.sh all

# The host test suite under ASan+UBSan, the concurrency tests under TSan (scripts/sanitize.sh).
sanitize: deps
	@scripts/sanitize.sh

# Each libFuzzer target for FUZZ_SECONDS (default 60) under ASan+UBSan (scripts/fuzz.sh).
FUZZ_SECONDS ?= 60
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

# Under /usr/local, or PREFIX=DIR.
install: build
	@cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

clean:
	@rm -rf $(BUILD)
