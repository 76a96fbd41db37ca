# kvldp — two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Both build .venv from nothing; every other target is a convenience.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= dev,broker,plots,dashboard

.PHONY: demo test lint typecheck unit venv clean prometheus stunnel java maven kafka kafka-lock bench-deps evaluate dashboard \
        node grafana-schema

EXPERIMENTS := horigome-table4 horigome-table5 sun-fig1 sun-conditional pckv-synthetic fhr-zipf \
               instantaneous-price instantaneous-change

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvldp needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kvldp demo

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy -p kvldp

# the whole suite on TEST_WORKERS processes (pytest-xdist; docs/performance.md says what a
# test must do to stay safe in parallel); the slowest tests are listed at the end: the
# suite must stay well under 15 minutes
TEST_WORKERS ?= 2
unit: $(STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# the peer libraries `kvldp bench peers` compares against (optional: not needed by make test)
bench-deps: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'

# the Grafana dashboard of deploy/, generated from src/kvldp/dashboard.py (Grafana's Foundation
# SDK, the dashboard extra); tests/test_dashboard_schema.py checks it against Grafana's schema
dashboard: $(STAMP)
	$(BIN)/python -m kvldp.dashboard --out deploy/grafana/dashboards/kvldp.json

# the papers' full grids (about an hour on two cores); outputs land in docs/results/NAME/
evaluate: $(STAMP)
	@for e in $(EXPERIMENTS); do $(BIN)/kvldp evaluate --experiment $$e --out docs/results/$$e || exit 1; done
	$(BIN)/kvldp evaluate --calibration --out docs/results/calibration
	$(BIN)/kvldp evaluate --calibration --instantaneous-share 0.5 --out docs/results/calibration-instantaneous

# the real-Prometheus test needs Debian's prometheus; install it only when it is missing
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus package (used by tests/test_prometheus.py)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq prometheus >/dev/null; }

# the TLS broker tests put Debian's stunnel in front of Tansu; install it only when it is missing
stunnel:
	@{ command -v stunnel4 || command -v stunnel; } >/dev/null 2>&1 || { \
	  echo "installing Debian's stunnel4 package (used by tests/test_broker_tls.py)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq stunnel4 >/dev/null; }

# the properties-format tests compare kvldp's reading with Java's (java.util.Properties,
# run as a single source file: Debian's JRE has the compiler module that needs); install
# Debian's default-jre-headless only when java is missing (its set-up links man pages
# into /usr/share/man/man1, which slim images lack)
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing Debian's default-jre-headless package (used by tests/test_properties_file.py)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo mkdir -p /usr/share/man/man1 && $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq default-jre-headless >/dev/null; }

# Apache Kafka for `kvldp broker --apache` (README, "Apache Kafka on one machine"): the jars of the version
# deploy/apache-kafka/pom.xml pins, from Maven Central through Maven (its local repository
# kept in .cache/kafka too), checked against the SHA-256 of every jar in
# deploy/apache-kafka/libs.sha256; a fetched, checked version is not fetched again
KAFKA_POM     := deploy/apache-kafka/pom.xml
KAFKA_LOCK    := deploy/apache-kafka/libs.sha256
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' $(KAFKA_POM))
KAFKA_CACHE   := .cache/kafka
KAFKA_LIBS    := $(KAFKA_CACHE)/$(KAFKA_VERSION)/libs
MVN_FETCH      = mvn -q -B -Dstyle.color=never -f $(KAFKA_POM) -Dmaven.repo.local=$(abspath $(KAFKA_CACHE))/maven-repository \
                 dependency:copy-dependencies -DincludeScope=runtime -Dmdep.prependGroupId=true

$(KAFKA_LIBS)/.checked: $(KAFKA_POM) $(KAFKA_LOCK) | java maven
	rm -rf $(KAFKA_LIBS) $(KAFKA_LIBS).part
	$(MVN_FETCH) -DoutputDirectory=$(abspath $(KAFKA_LIBS)).part
	cd $(KAFKA_LIBS).part && sha256sum --quiet --strict --check $(abspath $(KAFKA_LOCK))
	@[ "$$(LC_ALL=C ls $(KAFKA_LIBS).part)" = "$$(awk '{print $$2}' $(KAFKA_LOCK) | LC_ALL=C sort)" ] || \
	  { echo "Maven fetched other jars than $(KAFKA_LOCK) lists"; exit 1; }
	touch $(KAFKA_LIBS).part/.checked && mv $(KAFKA_LIBS).part $(KAFKA_LIBS)

kafka: $(KAFKA_LIBS)/.checked

# after a change of version in the pom: fetch it and write the lock from what Maven fetched
kafka-lock: | java maven
	rm -rf $(KAFKA_LIBS) $(KAFKA_LIBS).part
	$(MVN_FETCH) -DoutputDirectory=$(abspath $(KAFKA_LIBS)).part
	cd $(KAFKA_LIBS).part && LC_ALL=C sha256sum -- * > $(abspath $(KAFKA_LOCK))
	rm -rf $(KAFKA_LIBS).part

# make kafka's fetch needs Maven; install Debian's package only when mvn is missing
maven:
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "installing Debian's maven package (used by make kafka)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq maven >/dev/null; }

# the dashboard's schema check (tests/test_dashboard_schema.py): Grafana's dashboard schema for
# the Grafana of deploy/docker-compose.yml (npm's @grafana/schema) and the TypeScript compiler,
# at the versions tests/support/grafana_schema/package-lock.json pins, into .cache/grafana-schema;
# installed again only when the pins change
GRAFANA_SCHEMA := .cache/grafana-schema
SCHEMA_PINS    := tests/support/grafana_schema/package.json tests/support/grafana_schema/package-lock.json

$(GRAFANA_SCHEMA)/.installed: $(SCHEMA_PINS) | node
	rm -rf $(GRAFANA_SCHEMA) && mkdir -p $(GRAFANA_SCHEMA)
	cp $(SCHEMA_PINS) $(GRAFANA_SCHEMA)/
	cd $(GRAFANA_SCHEMA) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

grafana-schema: $(GRAFANA_SCHEMA)/.installed

# make grafana-schema needs Node.js and npm; install Debian's packages only when npm is missing
node:
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian's nodejs and npm packages (used by make grafana-schema)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq nodejs npm >/dev/null; }

test: prometheus stunnel java kafka grafana-schema lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
