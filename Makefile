# Entry points. `make demo` and `make test` work on a fresh Debian 12 machine as root:
# missing Debian packages are installed first (scripts/install-deps.sh).
BUILD    ?= build
SAN_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 900
FUZZ_TARGETS ?= fuzz_checkpoint fuzz_load_forward
JOBS     ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test test-sanitize demo bench fuzz install clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# A test that hangs fails after CTEST_TIMEOUT seconds instead of holding CI until its own limit
# (a heap overrun once showed as a deadlock in malloc inside Boost.Test's signal handler). The
# slowest test takes about 20 s here (release, 2 cores).
CTEST_TIMEOUT ?= 600

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS)

# The same suite with AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder.
# QAT_CUDA=OFF there: nvcc objects are not instrumented, the static CUDA runtime's allocations
# would be LeakSanitizer findings, and CI would compile the .cu files twice; this build checks
# the CUDA-less configuration (stubs that throw) instead. -g1 (line tables: sanitizer reports
# keep functions and lines) compiles 7-25% faster than -g, which the 2-core CI feels.
# Built with clang, so that CI runs a second compiler and the generic path as clang and GCC from
# 12.3 build it, Highway's EMU128 (Debian 12's GCC 12.2 builds SCALAR there instead, which the
# release suite runs); clang leaves out AVX3_DL (CMakeLists.txt), whose kernels the release
# suite runs.
test-sanitize: deps
	@./scripts/install-deps.sh clang
	@CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_SANITIZE=ON \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
	  -DQAT_BUILD_EXAMPLES=OFF -DQAT_BUILD_BENCH=OFF -DQAT_CUDA=OFF >/dev/null
	@cmake --build $(SAN_BUILD) -j$(JOBS)
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS)

demo: build
	@./scripts/demo.sh $(BUILD)

bench: build
	@./scripts/bench.sh $(BUILD)

# libFuzzer (clang, ASan + UBSan incl. float-cast-overflow) for FUZZ_SECONDS per target, the
# targets side by side on the cores, each in its own build folder on a fresh copy of its seed
# corpus (tests/fuzz/corpus*, regenerated first):
#   fuzz_checkpoint    the checkpoint reader
#   fuzz_load_forward  decode -> load_into -> forward of QAT, LSQ and int8 models
# QAT_CUDA=OFF: nvcc's host compiler (gcc) knows no -fsanitize=fuzzer-no-link. The default,
# 2 x 900 s, is the 30 minutes the release checklist asks for. Findings land in
# $(FUZZ_BUILD)/fuzz-<target>/crash-* etc.; reproduce one with $(FUZZ_BUILD)/tests/fuzz/<target> FILE.
fuzz:
	@./scripts/install-deps.sh clang
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_FUZZ=ON \
	  -DQAT_BUILD_TESTS=OFF -DQAT_BUILD_EXAMPLES=OFF -DQAT_BUILD_BENCH=OFF -DQAT_BUILD_TOOLS=OFF \
	  -DQAT_CUDA=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(FUZZ_TARGETS) fuzz_make_corpus
	@$(FUZZ_BUILD)/tests/fuzz/fuzz_make_corpus tests/fuzz/corpus
	@$(FUZZ_BUILD)/tests/fuzz/fuzz_make_corpus --load-forward tests/fuzz/corpus_load_forward
	@./scripts/fuzz.sh $(abspath $(FUZZ_BUILD)) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

install: build
	@cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD)
