#!/usr/bin/env python
"""Benchmark hf_vanilla against transformers' Llama, GPT-2, BERT and BART at matched sizes.

The same as `hf-vanilla bench`; see `hf_vanilla/tools/bench.py` for what is measured and
docs/performance.md for the figures. Example:

    python scripts/bench.py --json bench.json            # the full table (tens of minutes on 2 cores)
    python scripts/bench.py --tiny                       # a smoke test
    python scripts/bench.py --pairs llama --measure train generate --compile
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hf_vanilla.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
