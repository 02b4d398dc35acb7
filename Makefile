# Entry points. `make demo` and `make test` work on a fresh Debian 12 machine as root:
# missing Debian packages are installed first (scripts/install-deps.sh).
BUILD    ?= build
SAN_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
JOBS     ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test test-sanitize demo bench fuzz install clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The same suite with AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder.
test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_SANITIZE=ON \
	  -DQAT_BUILD_EXAMPLES=OFF -DQAT_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(SAN_BUILD) -j$(JOBS)
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS)

demo: build
	@./scripts/demo.sh $(BUILD)

bench: build
	@./scripts/bench.sh $(BUILD)

# libFuzzer (clang, ASan + UBSan) on the checkpoint reader for FUZZ_SECONDS, in its own build
# folder, on a copy of the seed corpus (tests/fuzz/corpus, regenerated first). Any single
# allocation over 64 MB counts as a finding (inputs are at most 64 KiB); the RSS limit leaves
# room for ASan's quarantine. Findings land in $(FUZZ_BUILD)/crash-* etc.; reproduce one with
# $(FUZZ_BUILD)/tests/fuzz/fuzz_checkpoint FILE.
fuzz:
	@./scripts/install-deps.sh fuzz
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_FUZZ=ON \
	  -DQAT_BUILD_TESTS=OFF -DQAT_BUILD_EXAMPLES=OFF -DQAT_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_checkpoint fuzz_make_corpus
	@$(FUZZ_BUILD)/tests/fuzz/fuzz_make_corpus tests/fuzz/corpus
	@rm -rf $(FUZZ_BUILD)/corpus && mkdir -p $(FUZZ_BUILD)/corpus && cp tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/
	@cd $(FUZZ_BUILD) && ./tests/fuzz/fuzz_checkpoint -max_len=65536 -max_total_time=$(FUZZ_SECONDS) \
	  -malloc_limit_mb=64 -rss_limit_mb=4096 -print_final_stats=1 corpus

install: build
	@cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD)
