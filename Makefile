# One command each, on a fresh machine: dependencies are installed first (scripts/setup.sh).
BUILD ?= build
JOBS  ?= $(shell nproc)
PREFIX ?= /usr/local

SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD     ?= build-fuzz
FUZZ_SECONDS   ?= 20
# The sanitizer build runs the unit tests; the GPU model tests (minutes under ASan) stay in the normal build.
SANITIZE_SKIP  ?= Models/*:*ModelsTest*:*TransformerModels*:*TransformerTraining*:Differential*:Bench.*:TrainTest.*:*CliErrors*:CausalLmVsTorch.*:ModelFolderTest.*:GenerateTest.*:FinetuneTest.*:ImageFinetuneTest.*

.PHONY: setup build test install demo clean sanitize fuzz
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && MEGANEURA_VALIDATE=1 ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory sanitize fuzz

# libmeganeura.so, the headers, the command and the CMake / pkg-config files under PREFIX.
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The unit tests built with AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: setup
	@cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGANEURA_SANITIZE=ON >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target meganeura_tests meganeura
	@cd $(SANITIZE_BUILD) && MEGANEURA_VALIDATE=1 ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ./meganeura_tests --gtest_brief=1 --gtest_filter='-$(SANITIZE_SKIP)'

# Each libFuzzer target for FUZZ_SECONDS from its seed corpus (fuzz/corpus/<target>), under ASan and UBSan.
fuzz: setup
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGANEURA_FUZZ=ON \
	  -DMEGANEURA_TESTS=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors fuzz_idx fuzz_config fuzz_tokenizer fuzz_image fuzz_onnx
	@for t in safetensors idx config tokenizer image onnx; do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	    -artifact_prefix=$(FUZZ_BUILD)/crash-$$t- $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t > $(FUZZ_BUILD)/fuzz-$$t.log 2>&1 \
	    || { tail -n 40 $(FUZZ_BUILD)/fuzz-$$t.log; echo "fuzz_$$t failed; the input is $(FUZZ_BUILD)/crash-$$t-*"; exit 1; }; \
	  echo "fuzz_$$t: $$(grep '^Done' $(FUZZ_BUILD)/fuzz-$$t.log)"; \
	done

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
