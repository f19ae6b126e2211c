# Two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast docs venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: the local CPU wheel; anything later that needs torch is satisfied by it
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/mmdsynth fit --method dp-ntk --dataset digits --epsilon 10 --delta 1e-5 --iterations 600 \
		--batch-size 500 --out runs/demo
	$(BIN)/mmdsynth evaluate runs/demo --n 2000
	$(BIN)/mmdsynth inspect runs/demo

# two pytest-xdist workers, one compute thread each (tests/conftest.py), a test file per worker at a
# time (module fixtures such as the PostgreSQL server and the Ray cluster start once); the package's byte
# code compiled first, so that the suite's many Python processes (workers, command-line and docs runs)
# load it instead of each compiling the package again (they write none where PYTHONDONTWRITEBYTECODE is set)
test: $(STAMP)
	$(BIN)/python -m compileall -q mmdsynth
	MMDSYNTH_DATA_DIR=$${MMDSYNTH_DATA_DIR:-../shared/datasets} $(BIN)/python -m pytest -q -n 2 --dist loadfile

test-fast: $(STAMP)
	$(BIN)/python -m compileall -q mmdsynth
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) runs site *.egg-info
