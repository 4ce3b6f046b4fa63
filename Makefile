# One command each, on a fresh machine: dependencies are installed first (scripts/setup.sh).
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: setup build test demo clean
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && MEGANEURA_VALIDATE=1 ctest --output-on-failure -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
