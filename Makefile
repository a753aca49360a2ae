# README's entry points. Each one installs what is missing first.
JOBS       ?= $(shell nproc)
BUILD      ?= build
ASAN_BUILD ?= build-asan
DEMO_STORE ?= $(BUILD)/demo-store
ANNEAL      = $(BUILD)/cli/anneal
FMNIST      = /usr/share/datasets/fashion-mnist

.PHONY: all deps build build-anneal demo test test-sanitize bench package package-test clean fuzz

all: build

deps:
	@packaging/install-deps

# A unity build (CMake's batches of 8 sources per compiler run): a fresh
# clone's anneal builds in 178 s instead of 241 on 2 cores, since the
# headers every source includes (oneDNN, oneTBB, Boost, nlohmann-json) are
# parsed once a batch. A developer's own build directory may leave it off
# for faster rebuilds of one file; the sanitizer build (test-sanitize) is a
# plain one, so a source that compiles only thanks to the includes of
# another in its batch still fails there.
$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The anneal executable and the libraries it links, nothing else: no GPU or
# MPI plugin (nvcc), no test binaries, no fuzz replays. What the demo runs.
build-anneal: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target anneal

# The main job end to end on Fashion-MNIST, in a store under build/: import,
# train the MLP of docs/examples/fmnist-mlp.ini and score it on the test split.
# It builds only the anneal executable (build-anneal); make test builds the rest.
demo:
	@packaging/install-deps demo
	@$(MAKE) --no-print-directory build-anneal
	rm -rf $(DEMO_STORE)
	$(ANNEAL) --store $(DEMO_STORE) init
	$(ANNEAL) --store $(DEMO_STORE) data import fmnist $(FMNIST)/train-images-idx3-ubyte.gz \
	    --labels $(FMNIST)/train-labels-idx1-ubyte.gz \
	    --test $(FMNIST)/t10k-images-idx3-ubyte.gz --test-labels $(FMNIST)/t10k-labels-idx1-ubyte.gz
	$(ANNEAL) --store $(DEMO_STORE) data show fmnist@latest
	$(ANNEAL) --store $(DEMO_STORE) train docs/examples/fmnist-mlp.ini
	$(ANNEAL) --store $(DEMO_STORE) eval fmnist-mlp fmnist

# The suite includes the packaging checks (packaging/tests: man page against
# --help, completion, systemd-analyze verify, lintian, rpmlint, the package
# test), whose tools the package group installs.
test: build
	@packaging/install-deps package
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure

test-sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DANNEAL_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest -j $(JOBS) --output-on-failure

bench:
	@packaging/install-deps bench
	@$(MAKE) --no-print-directory build
	bench/run $(ANNEAL)

# build/anneal_VERSION_ARCH.deb and build/anneal-VERSION.ARCH.rpm from the
# Release build (packaging/CMakeLists.txt).
package:
	@packaging/install-deps package
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && cpack

# Installs the newest .deb into a throwaway Debian 12 root and uses it as
# user anneal, then removes and purges it (packaging/package-test). Needs
# root and the network; make test runs it too (ctest packaging.package_test).
package-test: package
	packaging/package-test "$$(ls -t $(BUILD)/anneal_*.deb | head -n1)" $(BUILD)/package-test

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

# libFuzzer targets (tests/fuzz) built with clang 14 in $(FUZZ_BUILD), each
# run for FUZZ_SECONDS one after another (FUZZ_TARGETS picks some).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
	    -DCMAKE_C_COMPILER=clang-14 -DANNEAL_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD) $(FUZZ_TARGETS)
