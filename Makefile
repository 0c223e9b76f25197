# Thin wrapper around CMake. `make` builds build/; `make test` builds and runs the tests in
# a release build, the PyTorch front end's tests (pytest, against the release build's
# kforge; they include a `kforge bench` smoke run) and the tests in an ASan+UBSan build.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)

.PHONY: all test test-release test-python test-asan bench clean
all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: test-release test-python test-asan

test-release: all
	cd $(BUILD) && ctest --output-on-failure

test-python: all
	cd python && KFORGE=$(CURDIR)/$(BUILD)/kforge python3 -m pytest -q tests

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKF_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure

# CPU benchmark over tasks/ (see bench/cpu_suite.py); results go in docs/benchmarks.md.
bench: all
	cc -O2 -fopenmp -DKF_BENCH_NO_EMIT bench/sgemm_openblas.c $$(pkg-config --cflags --libs openblas) -ldl -lm -o $(BUILD)/sgemm_openblas
	python3 bench/cpu_suite.py --markdown

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
