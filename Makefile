# Every target sets itself up first (tools/setup.sh is idempotent and quick when done).
SHELL := /bin/bash
PY := .venv/bin/python
NOTEBOOKS := $(wildcard book/*.ipynb)
# GRAPHOPT_QUIET: no progress bars in saved or compared outputs (JupyterLab shows them)
# Cell timeout 1200 s: chapter 7's one interleaved measurement of every variant took
# more than 600 s on the scalar CPU leg while the site build and pytest shared the cores.
NBVAL := GRAPHOPT_QUIET=1 $(PY) -m pytest -p no:cacheprovider --nbval --nbval-current-env \
	--nbval-sanitize-with tests/nbval_sanitize.cfg \
	--nbval-cell-timeout=1200 --nbval-kernel-startup-timeout=120
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# `make lab LANG=zh` asks for the Chinese book. make exports a command-line variable
# to every recipe, and LANG is the C library's locale: `zh` is none, so the recipes
# get a valid one instead (Python and Jupyter read files by the locale's encoding).
ifeq ($(origin LANG),command line)
ZH := $(filter zh zh_CN zh-CN zh_CN.UTF-8,$(LANG))
override LANG := C.UTF-8
endif
ZH_DIR := book/_build/notebooks_zh
# The Chinese leg's sanitizer: the English rules, then tests/nbval_sanitize_zh.cfg
ZH_SANITIZE := .cache/nbval_sanitize_zh.cfg
NBVAL_ZH = GRAPHOPT_LANG=zh $(subst tests/nbval_sanitize.cfg,$(ZH_SANITIZE),$(NBVAL))
LAB_DIR := $(if $(ZH),$(ZH_DIR),book)

export PYTHONHASHSEED := 0
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor
export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba

.PHONY: setup setup-browser setup-site lab lint test test-unit test-notebooks test-cpus site \
	labs grade bench execute clean lab-zh notebooks-zh test-notebooks-zh catalogs library-catalog \
	lab-tests-catalog test-newest-torch slides

setup:
	@bash tools/setup.sh

setup-browser:
	@bash tools/setup.sh --browser

setup-site:
	@bash tools/setup.sh --site

## lab: set everything up and open the book in JupyterLab
##      make lab LANG=zh (or make lab-zh): the Chinese book, rendered from the English
##      notebooks (their code and outputs) and the catalogs into book/_build/notebooks_zh
lab: setup $(if $(ZH),notebooks-zh)
	@# The book's saved outputs (drawings, explorers) show only in trusted notebooks.
	$(PY) -m jupyter trust $(LAB_DIR)/*.ipynb
	$(if $(ZH),GRAPHOPT_LANG=zh) $(PY) -m jupyter lab $(ROOT_FLAG) \
		--ServerApp.root_dir=$(LAB_DIR)

lab-zh:
	@$(MAKE) --no-print-directory lab LANG=zh

## notebooks-zh: render the Chinese chapters and pages (CHAPTERS="03 05": only those)
notebooks-zh: setup
	$(PY) tools/zh_notebooks.py book $(CHAPTERS)

## catalogs: after changing English prose, bring the Chinese catalogs up to date: new
##           paragraphs get empty entries, changed ones are marked fuzzy (to review),
##           for the book (sphinx-intl) and the lab hand-outs
catalogs: setup-site
	$(PY) -m sphinx -b gettext -q -D nb_execution_mode=off book book/_build/gettext
	.venv/bin/sphinx-intl update -p book/_build/gettext -l zh_CN -d book/locales -w 0
	$(PY) tools/zh_notebooks.py extract
	@$(MAKE) --no-print-directory library-catalog
	@$(MAKE) --no-print-directory lab-tests-catalog

## library-catalog: the library's own messages (verdicts, table headers, plot labels,
##                  notes): Babel extracts every _("...") from src/graphopt, updates
##                  src/graphopt/locale/zh_CN/LC_MESSAGES/graphopt.po (new: empty,
##                  changed: fuzzy, to translate) and compiles the .mo committed beside it
# The .pot is a by-product (the .po holds everything); obsolete entries are dropped.
LIB_LOCALE := src/graphopt/locale
LIB_POT := .cache/i18n/graphopt.pot
NOTES_POT := .cache/i18n/notes.pot
BABEL_KEYWORDS := -k gettext_in:2
library-catalog: setup
	@mkdir -p $(dir $(LIB_POT))
	.venv/bin/pybabel -q extract --add-location=file --sort-output $(BABEL_KEYWORDS) \
		--project=graphopt -o $(LIB_POT) src/graphopt
	.venv/bin/pybabel -q update --ignore-obsolete -i $(LIB_POT) -d $(LIB_LOCALE) \
		-D graphopt -l zh_CN
	.venv/bin/pybabel -q compile --statistics -d $(LIB_LOCALE) -D graphopt
	@# the passes' notes (graphopt.i18n.note): data in English, shown translated
	.venv/bin/pybabel -q extract --add-location=file --sort-output \
		--no-default-keywords -k note --project=graphopt -o $(NOTES_POT) src/graphopt
	.venv/bin/pybabel -q update --ignore-obsolete -i $(NOTES_POT) -d $(LIB_LOCALE) \
		-D notes -l zh_CN
	.venv/bin/pybabel -q compile --statistics -d $(LIB_LOCALE) -D notes

## lab-tests-catalog: the lab tests' own words (what each case checks, what each
##                    assertion says to fix): Babel extracts them from the masters'
##                    test cells (tools/grading/lab_messages.py), updates
##                    labs/locales/zh_CN/LC_MESSAGES/lab_tests.po and compiles its .mo
LAB_TESTS_POT := .cache/i18n/lab_tests.pot
lab-tests-catalog: setup
	@mkdir -p $(dir $(LAB_TESTS_POT))
	PYTHONPATH=tools .venv/bin/pybabel -q extract --add-location=file --sort-output \
		-F tools/grading/lab_tests.cfg --project=graphopt -o $(LAB_TESTS_POT) labs
	.venv/bin/pybabel -q update --ignore-obsolete -i $(LAB_TESTS_POT) -d labs/locales \
		-D lab_tests -l zh_CN
	.venv/bin/pybabel -q compile --statistics -d labs/locales -D lab_tests

## test-notebooks-zh: nbval on the Chinese chapters, as test-notebooks runs the English
##                    ones (same sanitizer and flags), e.g. CHAPTERS=05
test-notebooks-zh: notebooks-zh $(ZH_SANITIZE)
	$(NBVAL_ZH) $(if $(CHAPTERS),$(CHAPTERS:%=$(ZH_DIR)/%*.ipynb),$(ZH_DIR)/*.ipynb)

$(ZH_SANITIZE): tests/nbval_sanitize.cfg tests/nbval_sanitize_zh.cfg
	@mkdir -p $(dir $@)
	cat $^ > $@

## test: set everything up and run every test (unit, property, notebooks, site, browser, labs),
##       and the notebooks and kernel tests again as other CPUs run them (test-cpus)
# The two notebook legs of test-cpus start first, side by side, each in its own log:
# the scalar CPU on the Chinese chapters (CPU_BOOK=zh: the English notebooks' code
# cells and saved outputs with translated prose, tools/zh_notebooks.py, so one pass
# checks both editions' outputs on the CPU furthest from this one) and AVX2 on the
# English ones. Meanwhile the site is built (it executes the English chapters on this
# CPU: its explorers are the static ones), then ruff, the import contracts and pytest.
# Every part runs even when another fails, so one CI run shows every failure; the
# legs' logs are printed at the end.
# OMP_WAIT_POLICY=PASSIVE: with three processes on two cores, OpenMP threads that
# spin while they wait take the cores from the others (measured here: three nbval
# runs of chapter 4 side by side took 45 s with spinning threads, 25 s passive).
NOTEBOOK_LOGS := .cache/notebooks
# Two pytest workers, each file on one (its session fixtures built once), the slowest
# files first (tests/conftest.py's SLOWEST_FILES: the run ends on short files, not
# with one worker alone on a long one). Not -n auto: a worker holds torch and real
# models, and 16 of them would fill a laptop's memory.
PYTEST_WORKERS := -n 2 --dist loadfile --no-loadscope-reorder
# The slowest tests are listed at the end: where a CI run's time went (the top 20
# held only 1500 of the 2580 worker-seconds of a 1291 s run; 60 shows the rest's
# biggest files too).
PYTEST_DURATIONS := --durations=60
test: export OMP_WAIT_POLICY := PASSIVE
test: setup-browser
	@status=0; mkdir -p $(NOTEBOOK_LOGS); pids=""; \
	for leg in "test-cpus CPU_MATRIX=default CPU_BOOK=zh" \
			$(if $(filter avx2,$(CPU_MATRIX)),"test-cpus CPU_MATRIX=avx2"); do \
		log=$(NOTEBOOK_LOGS)/$$(echo $$leg | tr ' =' '__').log; \
		$(MAKE) --no-print-directory $$leg > $$log 2>&1 & pids+=" $$!:$$log"; \
	done; \
	t0=$$(date +%s); \
	$(MAKE) --no-print-directory site || status=1; t1=$$(date +%s); \
	$(MAKE) --no-print-directory lint || status=1; t2=$$(date +%s); \
	if [ $$status = 0 ]; then \
		echo "$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_DURATIONS) tests"; \
		$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_DURATIONS) tests || status=1; fi; \
	t3=$$(date +%s); \
	echo "== notebook legs (as other CPUs; the scalar one on the Chinese edition)"; \
	for p in $$pids; do \
		wait $${p%%:*} || status=1; echo "== $${p#*:}"; cat $${p#*:}; done; \
	echo "== where the time went (s): site $$((t1 - t0)), lint $$((t2 - t1)), pytest" \
		"$$((t3 - t2)), notebook legs after pytest $$(($$(date +%s) - t3))"; \
	exit $$status

## test-cpus: the notebooks and the generated-kernel tests under a learner's other CPUs:
##   ATen and inductor with no vector instructions (default) or with AVX2 (x86-64 only),
##   numba compiling for a generic CPU of this architecture. Saved outputs must match.
# Each instruction set gets its own compiler caches: inductor's cache key does not
# include ATEN_CPU_CAPABILITY, so a shared cache hands one CPU's kernels to another.
# The scalar leg (default) runs every chapter: no vector instructions is the far end
# from this machine's AVX-512, where rounding differs most. The AVX2 leg, between the
# two, runs the chapters whose compared outputs come from kernels' arithmetic (1 and
# 2: ATen's conv and traced values, where other CPUs once printed other digits; 4:
# fused patterns and groups; 6: numba and inductor kernels). Chapters 3 and 5 compare
# graphs and counts, the same on any CPU; chapter 7 recompiles inductor's three
# models from an empty cache (about 4 minutes) and compares graphopt's counts.
# CPU_BOOK=zh: the scalar leg runs the Chinese chapters (make test does: the same code
# and saved outputs, so that pass also checks the Chinese edition).
CPU_BOOK := en
CPU_ZH := $(filter zh,$(CPU_BOOK))
KERNEL_TESTS := tests/test_codegen_cpu.py tests/test_codegen_reduce.py -k "not triton"
CPU_MATRIX := default $(if $(filter x86_64,$(shell uname -m)),avx2)
AVX2_NOTEBOOKS := $(filter book/01_% book/02_% book/04_% book/06_%,$(NOTEBOOKS))
test-cpus: setup $(if $(CPU_ZH),notebooks-zh $(ZH_SANITIZE))
	@status=0; \
	for isa in $(CPU_MATRIX); do \
		echo "== as another CPU: ATEN_CPU_CAPABILITY=$$isa NUMBA_CPU_NAME=generic"; \
		export ATEN_CPU_CAPABILITY=$$isa NUMBA_CPU_NAME=generic \
			TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/.cache/inductor-$$isa \
			NUMBA_CACHE_DIR=$(CURDIR)/.cache/numba-$$isa; \
		notebooks="$(if $(CPU_ZH),$(ZH_DIR)/*.ipynb,$(NOTEBOOKS))"; \
		[ $$isa = default ] || notebooks="$(AVX2_NOTEBOOKS)"; \
		$(PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS) || status=1; \
		$(if $(CPU_ZH),$(NBVAL_ZH),$(NBVAL)) -q $$notebooks || status=1; \
	done; exit $$status

## test-newest-torch: the unit tests on the newest torch pip serves (a learner's pip or
##   cloud notebook may bring it), in their own venv .venv-newest, upgraded on each run.
##   Not part of make test: on Linux pip brings a CUDA build of torch (0.5 GB or more).
# Not the notebooks, the site or the browser, and not the labs' graded runs (they
# execute lab notebooks) nor the checks of the book's text and translations: those
# test saved outputs and prose, which make test holds to the pinned torch. Nor the
# address-space bounds: measured for the CPU build, and a CUDA build maps its CUDA
# libraries at import (VmPeak of `import torch, graphopt`: 627 MiB on 2.13.0+cpu,
# 3184 MiB on 2.14.1+cu130), more than any bound.
NEWEST_VENV := .venv-newest
NEWEST_NOT_UNIT := tests/test_labs.py tests/test_grading_attacks.py \
	tests/test_i18n_labs.py tests/test_i18n_notebooks.py tests/test_translation_sync.py \
	tests/test_book_prose.py tests/test_book_numbers.py tests/test_entry_point_bounds.py
NEWEST_DESELECT := \
	tests/test_explorer_static_bounds.py::test_resnet18_static_explorer_fits_in_bounded_address_space
test-newest-torch: export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor-newest
test-newest-torch: export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba-newest
test-newest-torch:
	@GRAPHOPT_VENV=$(NEWEST_VENV) TORCH_VERSION=newest bash tools/setup.sh
	@$(NEWEST_VENV)/bin/python -c "import torch; print('== torch', torch.__version__)"
	$(NEWEST_VENV)/bin/python -m pytest -p no:cacheprovider $(PYTEST_WORKERS) \
		$(PYTEST_DURATIONS) -m "not browser" $(NEWEST_NOT_UNIT:%=--ignore=%) \
		$(NEWEST_DESELECT:%=--deselect=%) tests

## lint: ruff (pyproject.toml) and the import layers (import-linter contracts there)
# Not the lab masters: they hold otter's test format and code written to be optimised
# (dead code, unused names, imports inside cells) on purpose.
LINTED := src benchmarks tests tools book
lint: setup
	$(PY) -m ruff check $(LINTED)
	.venv/bin/lint-imports

test-unit: setup
	$(PY) -m pytest tests -m "not browser"

test-notebooks: setup
	$(NBVAL) $(NOTEBOOKS)

## execute: re-run every notebook in place so the committed outputs are fresh
execute: setup
	GRAPHOPT_QUIET=1 $(PY) -m jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=600 $(NOTEBOOKS)

## site: build the book into book/_build/html/en and /zh (chapters executed once and cached;
##       warnings are errors); book/_build/html/index.html sends a reader to en/
# Both languages read the same notebooks; myst-nb's cache keys on the code cells, so
# the Chinese build reuses the English build's execution (tools/site/book_languages.py).
# SITE_OPTS="-D nb_execution_mode=off" builds the pages from the saved outputs (quick).
SITE_LANGUAGES := en:en zh:zh_CN
SITE_NPM := tools/site/node_modules/.package-lock.json
site: setup-site slides
	@if [ ! -f $(SITE_NPM) ] || [ tools/site/package-lock.json -nt $(SITE_NPM) ]; then \
		echo "site: npm ci in tools/site (widget JavaScript and MathJax, once)"; \
		(cd tools/site && npm ci --no-audit --no-fund --loglevel=error); fi
	@node tools/site/bundle.js book/_build/assets
	@for pair in $(SITE_LANGUAGES); do dir=$${pair%%:*} lang=$${pair##*:} start=$$SECONDS; \
		cmd="$(PY) -m sphinx -b html -W --keep-going -q -j 1 -D language=$$lang $(SITE_OPTS)"; \
		cmd+=" -d book/_build/doctrees/$$dir book book/_build/html/$$dir"; echo "$$cmd"; \
		$$cmd || exit 1; echo "site: $$dir built in $$((SECONDS - start)) s"; done
	@cp tools/site/index.html book/_build/html/index.html

## slides: one reveal.js deck per chapter, English and Chinese, from the chapters'
##         saved (executed) outputs: book/_build/slides/<en|zh>/slides/<chapter>.html
##         (offline: reveal.js from npm). `make site` builds them first and
##         serves the decks beside the chapters, each chapter linking its own.
slides: setup-site
	@if [ ! -f $(SITE_NPM) ] || [ tools/site/package-lock.json -nt $(SITE_NPM) ]; then \
		echo "slides: npm ci in tools/site (reveal.js, once)"; \
		(cd tools/site && npm ci --no-audit --no-fund --loglevel=error); fi
	$(PY) tools/site/slides.py

## labs: otter-assign labs 1-7 (one per chapter): labs/dist/<lab>/student/labN.ipynb and autograder.zip
labs: setup
	$(PY) tools/grade.py build

## grade: grade a class folder offline, each hand-in in a bubblewrap sandbox, e.g.
##        make grade LAB=3 SUBMISSIONS=hand-ins/ [OUT=grades/] [WORKERS=4]
##        [TIMEOUT=300 s per submission] [SECRET=~/lab-secret] [UNSAFE=1: no sandbox]
##        [DEADLINE=2026-12-01T23:59+01:00 LATE_PENALTY=10 (% per day started)]
##        [STUDENT=id: regrade one hand-in into the latest gradebook.csv]
##        SUBMISSIONS: a Gradescope export (submission_metadata.yml), a Canvas or
##        Moodle download, or one notebook/folder per student (the newest wins)
##        writes OUT/<lab>/<time>/gradebook.csv (LMS import: id, name, score, max,
##        late penalty, final), scores.csv, summary.txt, feedback/<hand-in>.md|json
##        (default OUT: labs/dist/grades)
grade: setup
	@test -n "$(LAB)" -a -n "$(SUBMISSIONS)" || \
		{ echo "usage: make grade LAB=<1-7> SUBMISSIONS=<folder> [OUT=] [WORKERS=]" \
			"[DEADLINE= LATE_PENALTY=] [STUDENT=]"; exit 2; }
	$(PY) tools/grade.py grade $(LAB) $(SUBMISSIONS) --timeout $(or $(TIMEOUT),300) \
		$(if $(OUT),--out $(OUT)) $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(SECRET),--secret $(SECRET)) $(if $(UNSAFE),--unsafe) \
		$(if $(STUDENT),--student $(STUDENT)) $(if $(DEADLINE),--deadline $(DEADLINE)) \
		$(if $(LATE_PENALTY),--late-penalty $(LATE_PENALTY))

## bench: print the measured ratios (never part of make test)
bench: setup
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf book/_build book/jupyter_execute labs/dist .cache .pytest_cache .hypothesis
