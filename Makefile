# tpu-devops. `make setup && make test` on a fresh clone; `make run` starts the stdio server.
# tpu.env is read with ?= so a real environment variable always wins:
#   GOOGLE_CLOUD_ZONE=us-east5-a make run   (the region follows a zone set alone: us-east5)
# (A plain `-include tpu.env` would not do: make lets a makefile assignment beat the environment and
# then exports it to every recipe.) .tpu.env.mk is tpu.env rewritten as `KEY ?= value` lines.
-include .tpu.env.mk

.tpu.env.mk: tpu.env
	@sed -n -e 's/[$$]/$$$$/g' -e 's/^\([A-Za-z_][A-Za-z0-9_]*\)=\(.*\)$$/\1 ?= \2/p' $< > $@

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GOOGLE_CLOUD_ZONE ?= us-west4-a

.PHONY: setup run test audit tools snapshot lint format bench demo eval-analyst fake-gcp check-config gemini-extension wheel mcpb clean

# The Python environment and the Node tools do not depend on each other: a fresh clone installs them side
# by side (-j2). `make -q` first, so a set-up checkout prints nothing (`make run` is a stdio server: its
# stdout is the MCP protocol).
SETUP_STAMPS := $(VENV)/.installed node_modules/.installed
setup:
	@$(MAKE) -q $(SETUP_STAMPS) || $(MAKE) --no-print-directory -j2 $(SETUP_STAMPS)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The MCP Inspector CLI: a second, independent MCP client used by the tests (needs Node.js and npm).
# `npm ci` installs exactly what package-lock.json says and never rewrites it (`npm install` would, and
# a fresh clone would show a modified lock file); a lock out of step with package.json stops here with
# npm's "Missing: ... from lock file" instead.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js >= 20 (the Inspector CLI tests need it)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: setup
	./mcp-run.sh

# Gemini CLI: link this checkout as the tpu-devops extension (its MCP server, GEMINI.md and the policy that
# asks before any tool that changes state) and install the user policy that lets the read-only tools run
# without a prompt (Gemini CLI ignores allow rules shipped inside an extension). A gemini on PATH is used,
# else the one `make setup` installed.
GEMINI ?= $(shell command -v gemini 2>/dev/null || echo $(CURDIR)/node_modules/.bin/gemini)
gemini-extension: setup
	@$(GEMINI) extensions uninstall tpu-devops >/dev/null 2>&1 || true  # not linked yet is fine
	$(GEMINI) extensions link "$(CURDIR)" --consent
	mkdir -p "$(HOME)/.gemini/policies"
	cp gemini/tpu-devops-read-only.toml "$(HOME)/.gemini/policies/tpu-devops-read-only.toml"

# The wheel (dist/tpu_devops-<version>-py3-none-any.whl): the package with its startup template and data;
# `uvx --from dist/tpu_devops-*.whl tpu-devops-mcp` or `pipx install dist/tpu_devops-*.whl` run it anywhere.
wheel: setup
	$(PY) -m pip wheel . --no-deps -q -w dist
	@rm -rf build tpu_devops.egg-info
	@ls dist/tpu_devops-*.whl

# The Claude Desktop bundle (dist/tpu-devops-<version>.mcpb), validated and packed by the official mcpb CLI.
mcpb: setup
	$(PY) scripts/build_mcpb.py

# Validate tpu.env plus the environment exactly as the server will, and print the result; fails on an
# invalid setting, an unknown tpu.env key (with the closest known one) or an unknown toolset name.
check-config: setup
	$(PY) -m tpu_devops.main --check-config

# In random order (pytest-randomly), a new one each run; the seed is printed at the end, and
# `make test SEED=N` runs that order again. The 15 slowest tests are listed at the end: the suite's
# time goes there first.
SEED ?= default
test: setup
	$(PY) -m pytest -q -p randomly --randomly-seed=$(SEED) --durations=15

# The security audit: malformed calls over every tool, planted secrets, injected orders, faults and races,
# through the MCP client against the fakes; prints each goal figure (make test runs its quick plan).
audit: setup
	$(PY) -m tests.audit

tools: setup
	$(PY) scripts/gen_tools.py --markdown GemmaTools.md --readme README.md

snapshot: setup
	$(PY) scripts/gen_tools.py --snapshots tests/data/toolsets

# ruff, the import contracts, and mypy with the pydantic plugin over the package ([tool.mypy] in pyproject.toml).
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: setup
	$(PY) scripts/bench.py

demo: setup
	$(PY) scripts/demo.py

# Score the Gemma analyst on the evaluation set against a live endpoint: VLLM_URL=http://IP:8000 make eval-analyst
eval-analyst: setup
	$(PY) scripts/eval_analyst.py

# The fake Google Cloud REST APIs plus a fake vLLM behind every node they create (loopback only), for
# manual MCP sessions without a cloud account; prints the variables to export.
fake-gcp: setup
	$(PY) -m tests.fakes.gcp

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info .tpu.env.mk build dist
