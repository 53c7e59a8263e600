"""The vLLM side of hf_vanilla.tools.vllm_check: run by path under the vLLM venv's python, it imports only the
standard library and vllm (neither hf_vanilla nor this checkout's transformers: the saved folder carries the model's
code, loaded with ``trust_remote_code`` on the transformers vLLM brings). One JSON request per stdin line, one JSON
answer per line on the original stdout; vLLM's own logging goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def _completion_of(output, logprobs: bool) -> dict[str, Any]:
    answer = output.outputs[0]
    tokens = list(answer.token_ids)
    result: dict[str, Any] = {"tokens": tokens, "logprobs": [], "prompt_logprobs": []}
    if logprobs:
        result["logprobs"] = [step[token].logprob for step, token in zip(answer.logprobs, tokens, strict=True)]
        prompt = list(output.prompt_token_ids)
        result["prompt_logprobs"] = [step[token].logprob
                                     for step, token in zip(output.prompt_logprobs[1:], prompt[1:], strict=True)]
    return result


class VllmWorker:
    """vLLM engines by name, and the requests this script sends them."""

    def __init__(self) -> None:
        self.engines: dict[str, Any] = {}

    def load(self, name: str, folder: str, impl: str, max_model_len: int, kv_cache_bytes: int,
             profile_dir: str | None = None, enforce_eager: bool = False, runner: str = "generate",
             pooling: str = "CLS") -> dict[str, Any]:
        # loaded once worker_main has sent stdout to stderr: vLLM's logging would mix with the answers
        import torch
        import transformers
        import vllm

        extra = {}
        if profile_dir:
            extra["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": profile_dir,
                                        "torch_profiler_with_stack": False}
        if runner == "pooling":  # raw states of one token (CLS: the first, LAST: the last), as transformers' own
            extra["pooler_config"] = {"seq_pooling_type": pooling, "use_activation": False}
        start = time.perf_counter()
        self.engines[name] = vllm.LLM(
            model=folder, model_impl=impl, trust_remote_code=True, dtype="float32",
            skip_tokenizer_init=runner == "generate",  # vLLM's pooling front end needs the folder's tokenizer
            max_model_len=max_model_len, kv_cache_memory_bytes=kv_cache_bytes, enable_prefix_caching=False,
            seed=0, enforce_eager=enforce_eager, runner=runner, **extra)
        return {"seconds": time.perf_counter() - start, "vllm": vllm.__version__, "torch": torch.__version__,
                "transformers": transformers.__version__}

    def versions(self) -> dict[str, Any]:
        # loaded once worker_main has sent stdout to stderr: vLLM's logging would mix with the answers
        import torch
        import transformers
        import vllm

        return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__}

    def generate(self, name: str, prompts: list[list[int]], max_tokens: int, logprobs: bool = False,
                 together: bool = True, profile: bool = False) -> dict[str, Any]:
        # loaded once worker_main has sent stdout to stderr: vLLM's logging would mix with the answers
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        engine = self.engines[name]
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False,
                                logprobs=1 if logprobs else None, prompt_logprobs=1 if logprobs else None)
        requests = [TokensPrompt(prompt_token_ids=prompt) for prompt in prompts]
        if profile:
            engine.start_profile()
        start = time.perf_counter()
        if together:
            outputs = engine.generate(requests, params, use_tqdm=False)
        else:
            outputs = [engine.generate([request], params, use_tqdm=False)[0] for request in requests]
        seconds = time.perf_counter() - start
        if profile:
            engine.stop_profile()
        return {"seconds": seconds, "completions": [_completion_of(output, logprobs) for output in outputs]}

    def embed(self, name: str, prompts: list[list[int]], together: bool = True) -> dict[str, Any]:
        # loaded once worker_main has sent stdout to stderr: vLLM's logging would mix with the answers
        from vllm.inputs import TokensPrompt

        engine = self.engines[name]
        requests = [TokensPrompt(prompt_token_ids=prompt) for prompt in prompts]
        if together:
            outputs = engine.embed(requests, use_tqdm=False)
        else:
            outputs = [engine.embed([request], use_tqdm=False)[0] for request in requests]
        return {"embeddings": [list(output.outputs.embedding) for output in outputs]}

    def close(self, name: str) -> dict[str, Any]:
        self.engines.pop(name).llm_engine.engine_core.shutdown()
        return {}


def worker_main() -> int:
    """Serve requests from stdin, one JSON line each, answering on the original stdout. vLLM logs to stdout:
    everything but the answers goes to stderr (the orchestrator's log file)."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    worker = VllmWorker()
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        try:
            reply = getattr(worker, op)(**request)
        except Exception as error:  # the orchestrator raises it with the worker's log
            reply = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        answers.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
