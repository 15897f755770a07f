# rocketbox developer and CI entry points. `make test` is what .ci/run calls.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

# Debian packages the tests need beyond PostgreSQL (which the machines have); chromium and
# chromium-driver: the console's browser tests
SYSTEM_PACKAGES := redis-server libpostgresql-jdbc-java libxerial-sqlite-jdbc-java chromium \
	chromium-driver nats-server
# the RabbitMQ target's tests run its node as a plain process (tests/support/rabbitmq_server.py)
SYSTEM_PACKAGES += rabbitmq-server
# the JDBC jars the Spark audit reads the outbox with (make demo installs them when Java is there)
DEMO_PACKAGES := libxerial-sqlite-jdbc-java libpostgresql-jdbc-java
PG_JDBC_JAR := /usr/share/java/postgresql.jar
SQLITE_JDBC_JAR := /usr/share/java/sqlite-jdbc.jar

.PHONY: venv system-deps test lint demo clean

## venv: .venv with the project installed editable, all extras and dev tools
venv: $(VENV_STAMP)

# Re-installs when pyproject.toml is newer than the stamp, or .venv is gone.
$(VENV_STAMP): pyproject.toml
	@test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(VENV_PY) -m pip install --quiet -e '.[all,dev,bench]'
	@touch $@

## system-deps: redis-server and the JDBC jars from apt (as root); warn otherwise
system-deps:
	@missing=(); \
	command -v redis-server >/dev/null 2>&1 || missing+=(redis-server); \
	test -f $(PG_JDBC_JAR) || missing+=($(PG_JDBC_JAR)); \
	test -f $(SQLITE_JDBC_JAR) || missing+=($(SQLITE_JDBC_JAR)); \
	test -x /usr/lib/rabbitmq/bin/rabbitmq-server || missing+=(rabbitmq-server); \
	command -v chromium >/dev/null 2>&1 || missing+=(chromium); \
	command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver); \
	command -v nats-server >/dev/null 2>&1 || test -x /usr/sbin/nats-server || missing+=(nats-server); \
	pg_packages=(); \
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || pg_packages=(postgresql); \
	if [[ $${#missing[@]} -eq 0 && $${#pg_packages[@]} -eq 0 ]]; then exit 0; fi; \
	echo "system-deps: missing: $${missing[*]} $${pg_packages[*]}"; \
	if [[ $$(id -u) -eq 0 ]]; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq; \
	  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) $${pg_packages[*]}; \
	else \
	  echo "system-deps: WARNING: not root, not installing; as root run:" >&2; \
	  echo "  apt-get install -y $(SYSTEM_PACKAGES) $${pg_packages[*]}" >&2; \
	  echo "system-deps: tests that need these will skip (and fail when CI=true)" >&2; \
	fi

## test: lint, then the whole pytest suite (extra args: PYTEST_ARGS=...)
test: venv system-deps lint
	$(VENV_PY) -m pytest $(PYTEST_ARGS)

## lint: ruff over code and tests, mypy --strict over the packages and bench/, the layer contracts
lint: venv
	$(VENV)/bin/ruff check broker_lite outbox integrations spark migrations procgroup examples bench tests docs
	$(VENV)/bin/mypy --strict broker_lite outbox spark integrations procgroup
	$(VENV)/bin/mypy --strict -p examples.demo
	$(VENV)/bin/mypy --strict bench
	$(VENV)/bin/lint-imports --no-cache
	$(VENV_PY) -m pytest -q -p no:cacheprovider tests/test_target_seam.py  # no broker branch outside outbox/targets

## demo: the end-to-end demo on embedded defaults (with Java: the JDBC jars its Spark audit reads)
demo: venv
	@if command -v java >/dev/null 2>&1 && ! test -f $(SQLITE_JDBC_JAR); then \
	  if [[ $$(id -u) -eq 0 ]]; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get -o DPkg::Lock::Timeout=600 update -qq; \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $(DEMO_PACKAGES); \
	  else \
	    echo "demo: the Spark audit needs $(SQLITE_JDBC_JAR); install it as root with: apt-get install -y $(DEMO_PACKAGES) (the demo skips that audit without it)" >&2; \
	  fi; \
	fi
	$(VENV_PY) -m outbox demo

## clean: remove the venv and tool caches
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist
	find . -path ./.git -prune -o -type d \( -name __pycache__ -o -name '*.egg-info' \) \
	  -prune -exec rm -rf {} +
