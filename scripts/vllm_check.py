#!/usr/bin/env python
"""Serve a saved hf_vanilla model in vLLM and check its numbers against transformers' (hf_vanilla.tools.vllm_check).

    python scripts/vllm_check.py check RUN_DIR        # a decoder's greedy tokens and logprobs, an encoder's embeddings
    python scripts/vllm_check.py serve RUN_DIR        # the same through `vllm serve`, over HTTP on 127.0.0.1
    python scripts/vllm_check.py rows --out DIR       # every (row of the table, class a user saves): served or refused

vLLM runs in a venv of its own (scripts/vllm_env.sh builds it on first use); this process runs under the project's.
The logic is the package's (``hf_vanilla/tools/vllm_check.py``); this file only puts this checkout first on the path.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hf_vanilla from this checkout

from hf_vanilla.tools.vllm_check import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
