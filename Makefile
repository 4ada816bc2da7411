# Two commands do all the set-up on a fresh machine:
#   make demo   - install, write the tiny demo checkpoint if absent, generate outputs/demo.mp4
#   make test   - install with the test extra (CPU PyTorch + diffusers/transformers as references), run the suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_CKPT ?= checkpoints/wan2.1-t2v-demo
OUT_DIR ?= outputs
# Test processes (pytest-xdist). Two on the project's 2-core CI machine: one process's compilation
# (single-threaded) overlaps the other's compute, 16.8 min against about 20 serially. Each process
# peaks at a few GiB; raise it only with the memory to match (0 runs the suite in one process).
# --dist worksteal gives each process a contiguous half of the tests (stealing only at the end), so a test
# file's module fixtures and compiled programs are mostly built in one process; the default scheduler's chunks
# shrink to 2 tests towards the end and split files between both (the four test_wan* files run with -n 2:
# 197 s of CPU by default, 177 s with worksteal, the sum of their separate runs 176 s).
TEST_WORKERS ?= 2

.PHONY: demo test bench install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(BIN)/python -m vidax.models.wan.demo $(DEMO_CKPT) --if-absent
	$(BIN)/vidax generate --checkpoint $(DEMO_CKPT) \
		--prompt "A majestic red panda climbing a bamboo tree in the snow, 4k" \
		--height 128 --width 128 --num-frames 17 --steps 8 --dtype float32 \
		--out $(OUT_DIR)/demo.mp4 --metrics-json $(OUT_DIR)/demo-metrics.json --mkdir

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# Side-by-side benchmarks against diffusers on this machine (minutes; see docs/benchmarks.md).
bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python -m bench.compare --config a
	$(BIN)/python -m bench.compare --config b
	$(BIN)/python -m bench.compare --config c
	$(BIN)/python -m bench.compare --config d
	$(BIN)/python -m bench.load
	$(BIN)/python -m bench.compile_study

clean:
	rm -rf $(OUT_DIR) $(DEMO_CKPT)
