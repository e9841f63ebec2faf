# Development tasks for cogworker_django. `make help` lists them.
#
# Every target that runs Python uses .venv (created by `make venv` with the
# interpreter scripts/find-python picks; override with `make PYTHON=/path/to/python`).
# Redis comes from COGWORKER_REDIS_URL (default redis://127.0.0.1:6379/0); `make redis`
# starts a throwaway local one when nothing answers there.

VENV        := .venv
VPY         := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# The package and its own dependencies only (Django, redis-py): what demo/runserver need.
BASE_STAMP  := $(VENV)/.installed-base
PORT        ?= 8000
MANAGE      := $(VPY) testproject/manage.py
PYTHON      ?=
PYTEST_ARGS ?=
BENCH_ARGS  ?=
LINT_PATHS  := cogworker_django tests

# The demo's admin account; development only.
DEMO_ADMIN_SNIPPET := from django.contrib.auth import get_user_model; \
User = get_user_model(); \
exists = User.objects.filter(username='admin').exists(); \
exists or User.objects.create_superuser('admin', 'admin@example.com', 'admin'); \
print('admin user: admin / admin' + ('' if exists else ' (created)'))

.DEFAULT_GOAL := help
.PHONY: help venv redis postgres postgres-stop test demo runserver migrate lint bench clean distclean
.PHONY: test-loaded mutate
.PHONY: docs dist

help:
	@echo "make demo       run the demo: migrate, admin user admin/admin, enqueue demo jobs, start a worker"
	@echo "make runserver  serve the test project (admin at http://127.0.0.1:\$$PORT/admin/, PORT=8000)"
	@echo "make test       run the whole test suite (PYTEST_ARGS='-k name -x' to narrow it)"
	@echo "make test-loaded  the timing-dependent tests LOAD_RUNS (20) times beside two CPU-bound processes"
	@echo "make lint       ruff check + ruff format --check + mypy (the package; strict on the public modules)"
	@echo "make bench      run the benchmark (BENCH_ARGS='...')"
	@echo "make soak       run the chaos soak (SOAK_ARGS='--seconds 3600')"
	@echo "make mutate     apply each break of scripts/mutations.toml in a copy; every one must fail its tests"
	@echo "make docs       build the documentation site into site/ (DOCS_ARGS=--strict as in CI)"
	@echo "make dist       build the sdist and wheel into dist/ and run twine check"
	@echo "make venv       create/refresh .venv (pip install -e '.[test]')"
	@echo "make redis      make sure a Redis answers at \$$COGWORKER_REDIS_URL (starts a local one if needed)"
	@echo "make postgres   start this checkout's throwaway PostgreSQL for the durable tests (prints its URL)"
	@echo "make postgres-stop  stop it (make test starts it and leaves it running for the next run)"
	@echo "make clean      remove caches and the demo database; make distclean also removes .venv and .tox"

venv: $(STAMP)

# --clear: a venv whose interpreter vanished (e.g. a removed pyenv version) is rebuilt.
$(VPY):
	@py="$(PYTHON)"; [ -n "$$py" ] || py=$$(scripts/find-python) || exit 1; \
	echo "creating $(VENV) with $$py ($$("$$py" --version 2>&1))"; \
	"$$py" -m venv --clear $(VENV)

# Re-install whenever pyproject.toml changes (dependencies or extras).
$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -e '.[test]'
	@touch $@

# demo and runserver need no test tools: the package alone, quietly, then one line.
$(BASE_STAMP): pyproject.toml | $(VPY)
	@echo "installing cogworker_django into $(VENV) (pip -q; the test tools come with 'make venv')"
	@$(VPY) -m pip install -q --disable-pip-version-check -e .
	@$(VPY) -c "import django, redis, cogworker_django as c; print(f'installed: cogworker_django {c.__version__}, Django {django.get_version()}, redis-py {redis.__version__}')"
	@touch $@

pyproject.toml:
	@echo "pyproject.toml is missing: run make from the repository root" >&2; exit 1

redis:
	@scripts/ensure-redis

postgres:
	@scripts/ensure-postgres

# make test leaves the cluster running (the next run reuses it in a second); this stops it.
postgres-stop:
	@scripts/ensure-postgres --stop

# The suite runs on TEST_WORKERS pytest-xdist processes (each test isolates itself by key
# prefix, private servers and its own local cluster per process, so they never share
# state); most of a test's time is waiting for a worker, so 4 beats the core count on 2
# cores. Whole files go to one process (--dist loadfile): a module's shared server or
# cluster is started once, and a test that checks what the module's earlier tests left
# sees them. TEST_WORKERS=0 runs it in this process, one test at a time.
TEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile)

# The durable-enqueue tests also run on PostgreSQL: scripts/ensure-postgres starts this
# checkout's throwaway cluster (or checks COGWORKER_TEST_POSTGRES_URL) and leaves it
# running for the next run (`make postgres-stop` stops it). Without one they run on
# SQLite only (outside CI; with CI=true a missing PostgreSQL fails them).
test: venv redis
	@pg=$$(scripts/ensure-postgres) || pg=""; \
	COGWORKER_TEST_POSTGRES_URL="$$pg" $(VPY) -m pytest $(XDIST) $(PYTEST_ARGS)

# A busy machine: the timing-dependent tests (beats, orphan threshold, stalls, shutdown
# grace, periodic ticks and boot, lock TTLs) LOAD_RUNS times in a row with two CPU-bound
# processes beside them (killed at the end), on TEST_WORKERS processes as `make test`.
# Widen or narrow with LOAD_TESTS (the whole suite: LOAD_TESTS=tests, about 5.5 minutes
# a run on 2 cores) or PYTEST_ARGS='-k name'; every run is reported, the target fails if
# any run failed.
LOAD_RUNS  ?= 20
TIMING_TESTS := tests/worker/test_recovery_*.py tests/worker/test_faults_outage.py \
	tests/worker/test_reliable_recovery.py tests/worker/test_reliable_shutdown.py tests/worker/test_killed_mid_run.py \
	tests/worker/test_worker_signals.py tests/worker/test_worker_runs.py tests/worker/test_shutdown_handover.py \
	tests/periodic/test_periodic_boot.py tests/periodic/test_periodic_fleet.py tests/periodic/test_periodic_fleet_faults.py \
	tests/periodic/test_periodic_claims.py tests/core/test_unique_dead.py tests/core/test_unique_worker.py \
	tests/worker/test_reliable_settled.py tests/worker/test_worker_outage.py tests/worker/test_worker_failures.py \
	tests/worker/test_worker_paths.py tests/worker/test_worker_poller.py tests/periodic/test_periodic_faults.py \
	tests/worker/test_faults_errors.py tests/worker/test_faults_keyguard.py tests/worker/test_faults_backoff.py \
	tests/controls/test_controls_limits.py tests/controls/test_controls_timeouts.py tests/djtasks/test_tasks_faults.py \
	tests/worker/test_worker_failure_path.py tests/worker/test_worker_command.py \
	tests/worker/test_reliable_drain.py
LOAD_TESTS ?= $(TIMING_TESTS)

test-loaded: venv redis
	@hogs=""; for i in 1 2; do $(VPY) -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	passed=0; failed=0; \
	for run in $$(seq 1 $(LOAD_RUNS)); do \
		echo "== test-loaded: run $$run of $(LOAD_RUNS)"; \
		if $(VPY) -m pytest -q $(XDIST) $(LOAD_TESTS) $(PYTEST_ARGS); then passed=$$((passed + 1)); \
		else failed=$$((failed + 1)); fi; \
	done; \
	echo "test-loaded: $$passed runs passed, $$failed failed (of $(LOAD_RUNS), two CPU-bound processes beside)"; \
	[ $$failed -eq 0 ]

migrate: $(BASE_STAMP)
	@$(MANAGE) migrate --noinput -v 0 && echo "database migrated (testproject/db.sqlite3)"

demo: $(BASE_STAMP) redis migrate
	@$(MANAGE) shell --no-imports -c "$(DEMO_ADMIN_SNIPPET)"
	@$(MANAGE) shell --no-imports -c "from demo.jobs import enqueue_demo; enqueue_demo()"
	@echo "starting a worker (Ctrl-C stops it); the admin: 'make runserver' in another terminal, http://127.0.0.1:$(PORT)/admin/"
	@COGWORKER_SETTINGS_JSON='{"RETRY_BACKOFF": "demo.jobs.demo_backoff", "QUEUES": ["critical:3", "default:2", "low"]}' exec $(MANAGE) cogworker

runserver: $(BASE_STAMP) redis migrate
	exec $(MANAGE) runserver 127.0.0.1:$(PORT)

lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy

# The peers (RQ, Dramatiq, Huey, Celery) are installed only for the benchmark.
# Sidekiq and BullMQ join when present: ruby + sidekiq on PATH (Debian: ruby ruby-sidekiq),
# and node + npm (BullMQ is installed into bench/peer_tasks/bullmq/node_modules).
bench: venv redis
	$(VPY) -m pip install -q -r bench/requirements.txt
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --silent --no-audit --no-fund --prefix bench/peer_tasks/bullmq || \
		echo "bench: npm install failed; BullMQ will be skipped"; fi
	$(VPY) -m bench $(BENCH_ARGS)

# The chaos soak: its own redis-server on a free port, never the one above.
.PHONY: soak
SOAK_ARGS ?=
soak: venv
	scripts/soak $(SOAK_ARGS)

# One-line breaks of the product code (scripts/mutations.toml), each applied alone in a copy
# of the checkout: the tests named for it must fail (MUTATE_ARGS='--only unique' narrows it).
MUTATE_ARGS ?=
mutate: venv redis
	scripts/mutate $(MUTATE_ARGS)

# The documentation site (mkdocs.yml): site/index.html. Only the `docs` extra's tools are
# installed (the API reference reads the source statically: no Django settings, no Redis).
DOCS_STAMP := $(VENV)/.docs-installed
DOCS_ARGS  ?=

$(DOCS_STAMP): pyproject.toml | $(VPY)
	$(VPY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))" > $(VENV)/docs-requirements.txt
	$(VPY) -m pip install -q -r $(VENV)/docs-requirements.txt
	@touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build $(DOCS_ARGS)
	@echo "docs: open site/index.html"

# The sdist and wheel: twine checks the metadata and that README renders, check-dist that
# both carry every package file (Lua scripts, templates, static, migrations).
dist: | $(VPY)
	$(VPY) -m pip install -q 'build>=1.2' 'twine>=5'
	rm -rf dist
	$(VPY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	$(VPY) scripts/check-dist

clean:
	find . -path ./$(VENV) -prune -o -path ./.tox -prune -o -name __pycache__ -type d -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache .mypy_cache build dist site *.egg-info testproject/db.sqlite3 test-results

distclean: clean
	rm -rf $(VENV) .tox
