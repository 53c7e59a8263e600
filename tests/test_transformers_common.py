"""scripts/transformers_common.sh takes transformers' real test modules only from a source tree of the release
installed: a tree of another release (whose tests call another API), or a folder that is no transformers tree, is
refused in one sentence before anything is downloaded. The common tests themselves are opt-in (docs/testing.md)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import hf_vanilla as hv

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path: Path, source_tree: Path | None, **variables: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_VANILLA_")}
    env |= {"HF_VANILLA_PYTHON": sys.executable, "HF_VANILLA_CACHE": str(tmp_path / "cache"), **variables}
    if source_tree is not None:
        env["HF_VANILLA_TRANSFORMERS_SRC"] = str(source_tree)
    return subprocess.run(["bash", str(ROOT / "scripts" / "transformers_common.sh")], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("tree_version", ["4.57.1", None], ids=["another-release", "no-tree"])
def test_a_source_tree_of_another_release_is_refused_before_any_download(tmp_path, tree_version):
    tree = tmp_path / "transformers"
    if tree_version:
        (tree / "src" / "transformers").mkdir(parents=True)
        (tree / "src" / "transformers" / "__init__.py").write_text(f'__version__ = "{tree_version}"\n')
    result = run_script(tmp_path, tree)
    assert result.returncode == 2, result.stdout + result.stderr
    found = tree_version or "(no src/transformers/__init__.py there)"
    assert f"is transformers {found}, but {transformers.__version__} is installed; check out tag " \
           f"v{transformers.__version__} there." in result.stderr
    assert not (tmp_path / "cache").exists(), "the script downloaded before refusing the tree"


def test_without_transformers_generate_tests_the_script_refuses_naming_the_fetch_before_any_download(tmp_path):
    """transformers' GenerationTesterMixin is in no PyPI artifact: a run without it would certify generate() unseen."""
    missing = tmp_path / "nowhere" / "test_utils.py"
    for variables, expected in (({}, tmp_path / "cache" / "transformers-common" / transformers.__version__ /
                                  "generation" / "test_utils.py"),
                                ({"HF_VANILLA_GENERATION_TESTS": str(missing)}, missing)):
        result = run_script(tmp_path, None, **variables)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"are not at {expected}; fetch them once with: curl -fsSL --create-dirs -o {expected} https://raw." \
               f"githubusercontent.com/huggingface/transformers/v{transformers.__version__}/tests/generation/" \
               "test_utils.py" in result.stderr, result.stderr
        assert not (tmp_path / "cache").exists(), "the script downloaded before refusing"


COMMON = ROOT / "scripts" / "transformers_common"
#: Ways a test is skipped or deselected: none may appear in the tester, the stand-ins or the script that runs them.
SKIPPING_NAMES = {"skipTest", "SkipTest", "skip", "skipIf", "skipUnless", "expectedFailure", "xfail", "skipif"}
SKIPPING_ARGUMENTS = ("--deselect", " -k ", "--ignore", "-m not")
#: Ways a test is made to pass as it is not written: a pinned draw, or a tolerance patched.
PINNING_NAMES = {"manual_seed", "set_seed", "seed", "global_rng", "patch", "finfo", "assert_close", "allclose"}
#: The mixin tests the tester overrides, each as a built-in tester does, running the mixin's body itself.
OVERRIDES = {"test_config": "run_common_tests", "test_inputs_embeds": "test_inputs_embeds"}


def test_the_common_tester_skips_nothing_the_mixins_would_run():
    """A skip is a claim: transformers' mixins decide from the model's own properties what does not apply (the RoPE
    tests ask ``hasattr(config, "rope_parameters")``), as for GPT-2, BERT and BART. The tester may not skip, and
    overrides only the tests a built-in tester overrides, each calling the mixin's code it stands for; it neither pins a
    seed nor touches a tolerance, so each test runs as transformers wrote it, on whatever the draw gives."""
    for path in COMMON.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert not names & SKIPPING_NAMES, f"{path.relative_to(ROOT)} skips tests: {sorted(names & SKIPPING_NAMES)}"
        assert not names & PINNING_NAMES, f"{path.relative_to(ROOT)} pins draws or tolerances: " \
                                          f"{sorted(names & PINNING_NAMES)}"
        tests = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
        for test in tests:
            assert test.name in OVERRIDES, f"{path.relative_to(ROOT)} overrides {test.name} of transformers' mixins"
            called = {node.func.attr for node in ast.walk(test)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
            assert OVERRIDES[test.name] in called, f"{test.name} does not run the mixin's {OVERRIDES[test.name]}"
        strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        assert not [text for text in strings if text.startswith("test_") and text not in OVERRIDES], \
            f"{path.relative_to(ROOT)} names a mixin test to replace it"
    script = [line for line in (ROOT / "scripts" / "transformers_common.sh").read_text().splitlines()
              if not line.lstrip().startswith("#")]
    assert not [arg for line in script for arg in SKIPPING_ARGUMENTS if arg in line], "transformers_common.sh leaves tests out"


def declared_in_tester(name: str):
    """A literal the tester declares at module level (it imports transformers' test modules, which only the script has)."""
    for node in ast.parse((COMMON / "test_vanilla_common.py").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise LookupError(f"scripts/transformers_common/test_vanilla_common.py declares no {name}")


def untrained_logit_spread(model: torch.nn.Module) -> float:
    torch.manual_seed(0)
    with torch.no_grad():
        return model.eval()(input_ids=torch.randint(3, 99, (13, 7))).logits.std().item()


def test_the_decoder_tester_draws_logits_at_its_twins_scale():
    """transformers' padding-free test compares bfloat16 logits within rtol = atol = eps, a margin GPT-2's and Llama's
    untrained logits leave wide. The paper's tied N(0, d^-1/2) embeddings make ours 9x theirs, and failed about 1 SDPA
    draw in 150 (docs/testing.md): the decoder tester takes its twins' head scale (TWIN_SHAPE), as their testers take
    their own defaults."""
    sizes = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)
    torch.manual_seed(0)
    twins = [untrained_logit_spread(GPT2LMHeadModel(GPT2Config(
                 vocab_size=99, n_embd=32, n_inner=37, n_layer=2, n_head=4, n_positions=64))),
             untrained_logit_spread(LlamaForCausalLM(LlamaConfig(max_position_embeddings=64, **sizes)))]
    shape = declared_in_tester("TWIN_SHAPE")["decoder"]
    for scheme in declared_in_tester("SCHEMES"):
        torch.manual_seed(0)
        config = hv.VanillaConfig(architecture="decoder", position_embedding_type=scheme, max_position_embeddings=64,
                                  hidden_dropout=0.0, **sizes, **shape)
        ours = untrained_logit_spread(hv.VanillaForCausalLM(config))
        assert ours < 2 * max(twins), f"the {scheme} decoder tester's untrained logits spread {ours:.3f}, " \
                                      f"the twins' {max(twins):.3f}: TWIN_SHAPE no longer gives their head's scale"
