# Thin wrapper around CMake. `make` builds build/; `make test` builds and runs the tests in
# a release build, the PyTorch front end's tests (pytest, against the release build's
# kforge; they include a `kforge bench` smoke run), the tests in an ASan+UBSan build and a
# short run of the libFuzzer harnesses (clang; `make fuzz` is the long run, docs/fuzzing.md),
# kforge slurm against a real one-node Slurm cluster (tests/slurm_real.sh, docs/cluster.md),
# and last the LLM agent against a real local model server (tests/llm_real.sh: it builds
# llama-cpp-python once, ~11 min on 2 cores, and keeps the wheel; docs/llm.md).
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 3600
JOBS ?= $(shell nproc)
# tests run two at a time (ctest -j, pytest-xdist -n), the clock-reading ones alone (RUN_SERIAL
# in CMakeLists.txt); CTEST_JOBS=1 PYTEST_JOBS=0 runs everything one at a time
CTEST_JOBS ?= 2
PYTEST_JOBS ?= 2
# pytest-xdist (scripts/setup.sh installs it); without it the suite runs in one process
PYTEST_N = $(shell [ "$(PYTEST_JOBS)" -gt 0 ] 2>/dev/null && python3 -c "import xdist" 2>/dev/null && echo "-n $(PYTEST_JOBS)")

.PHONY: all test check test-release test-python test-asan test-fuzz test-slurm-real test-llm-real fuzz fuzz-build bench clean
all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# in this order (make runs a target's prerequisites left to right): the real-model test
# last, so its build and its server do not share the machine with the timing tests
test: test-release test-python test-asan test-fuzz test-slurm-real test-llm-real

# the edit-test cycle: the release build's tests but the slow ones (the search runs, the
# template sweeps through the pipeline, the store and LLM end-to-end runs, the memory
# checkers, the browser); the op registry's own checks run, its pipeline sweep does not
CHECK_SLOW = test_analysis_loop|test_gpu_templates|test_gpu_tf32|test_gpu_redepi|test_templates|test_ops|test_llm_loop|test_store_cli|test_store_llm|test_resume|test_memcheck|test_memcheck_cuda|test_report_html|test_cheats|test_faults|test_faults_opencl
check: all
	cd $(BUILD) && ctest -j $(CTEST_JOBS) --output-on-failure -E '^($(CHECK_SLOW))$$'
	cd $(BUILD) && KFORGE_RUNNER=$(CURDIR)/$(BUILD)/kforge-runner ./test_ops --filter 'ops_registry/*'

test-release: all
	cd $(BUILD) && ctest -j $(CTEST_JOBS) --output-on-failure

test-python: all
	cd python && KFORGE=$(CURDIR)/$(BUILD)/kforge python3 -m pytest -q $(PYTEST_N) tests

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKF_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest -j $(CTEST_JOBS) --output-on-failure

fuzz-build:
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DKF_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# seconds: a fixed seed and count per harness (cmake/fuzz.cmake)
test-fuzz: fuzz-build
	cd $(FUZZ_BUILD) && ctest --output-on-failure

# kforge slurm --submit on a one-node cluster started here (munge, slurmctld, slurmd; ~1 min)
test-slurm-real: all
	tests/slurm_real.sh $(BUILD)

# the LLM agent against llama-cpp-python's server and SmolLM2-135M from PyPI (plumbing only)
test-llm-real: all
	tests/llm_real.sh $(BUILD)

# the long run: each harness for FUZZ_SECONDS, its corpus kept in $(FUZZ_BUILD) between runs
fuzz: fuzz-build
	cd $(FUZZ_BUILD) && mkdir -p corpus_parse corpus_graph_json && \
	  ./fuzz_parse -max_total_time=$(FUZZ_SECONDS) -max_len=65536 corpus_parse ../tasks && \
	  ./fuzz_graph_json -max_total_time=$(FUZZ_SECONDS) -max_len=65536 corpus_graph_json ../tests/fuzz/corpus_json

# CPU benchmark over tasks/ (see bench/cpu_suite.py); results go in docs/benchmarks.md.
bench: all
	cc -O2 -fopenmp -DKF_BENCH_NO_EMIT bench/sgemm_openblas.c $$(pkg-config --cflags --libs openblas) -ldl -lm -o $(BUILD)/sgemm_openblas
	python3 bench/cpu_suite.py --markdown

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
