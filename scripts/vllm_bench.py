#!/usr/bin/env python
"""Time an hf_vanilla decoder in vLLM against the same-shape Llama, after checking both (hf_vanilla.tools.vllm_bench).

    python scripts/vllm_bench.py bench --out DIR      # same-shape hf_vanilla and Llama: check both, then time
    python scripts/vllm_bench.py profile --out DIR    # where the Transformers backend's time goes (Llama vs Llama)

The logic is the package's (``hf_vanilla/tools/vllm_bench.py``); this file only puts this checkout first on the path.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hf_vanilla from this checkout

from hf_vanilla.tools.vllm_bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
