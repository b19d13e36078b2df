"""Programs and tokenizers for the pterun.llm tests, and ExecuTorch's runner to compare with.

The dynamic and static Llama here have ``max_seq_len`` equal to their context, so that both runners stop at
the end of the context (tests/support/llm_programs.py says why); the others generate within it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
import torch

from pterun.format import ProgramFile
from tests.support import llm_tokenizers
from tests.support.exporting import ExportSpec, export_program
from tests.support.llm_programs import MAX_CONTEXT_LEN, llama_program
from tests.support.llm_tokenizers import VOCAB
from tests.support.models.examples import KVStep, llama_transformer
from tests.support.multimodal_programs import MODELS, MultimodalProgram, multimodal_program
from tests.support.premises import assert_calls

# The static program stops at any of these tokens, so that EOS handling is compared as well.
STATIC_EOS = tuple(range(120, 190))


@pytest.fixture(scope="session")
def tokenizer_path():
    return llm_tokenizers.tokenizer_path("hf")


@pytest.fixture(scope="session")
def byte_tokenizer_path():
    """Many of its tokens are parts of a UTF-8 character."""
    return llm_tokenizers.tokenizer_path("bytes")


def _llama(variant: str, eos: tuple[int, ...] = (llm_tokenizers.EOS_ID,), **knobs):
    pte = llama_program(variant, eos, **knobs).pte
    assert_calls(pte, {"llama::custom_sdpa.out", "llama::update_cache.out"}, what="the exported Llama: ")
    return pte


@pytest.fixture(scope="session")
def dynamic_llama():
    return _llama("dynamic", max_seq_len=MAX_CONTEXT_LEN)


@pytest.fixture(scope="session")
def static_llama():
    return _llama("static", STATIC_EOS, max_seq_len=MAX_CONTEXT_LEN)


@pytest.fixture(scope="session")
def uncached_llama():
    """The same Llama without a KV cache: every call takes the whole sequence so far."""
    pte = llama_program("no-kv-cache").pte
    assert len(ProgramFile(pte).plan("forward").inputs) == 1, "premise: forward takes the tokens alone"
    return pte


@pytest.fixture(scope="session")
def bf16_llama():
    """The same Llama exported in bfloat16: its logits are bfloat16."""
    return _llama("dynamic-bf16")


@pytest.fixture(scope="session", params=["dynamic", "static"])
def llama(request, dynamic_llama, static_llama):
    return dynamic_llama if request.param == "dynamic" else static_llama


def one_token_llama(claims_dynamic: bool, *, external: bool = False):
    """The Llama example with a KV cache taking exactly one token per call, with the exporter's metadata;
    ``external`` puts its weights in a .ptd file."""
    metadata = {"get_max_seq_len": 32, "get_max_context_len": 32, "use_kv_cache": True,
                "enable_dynamic_shape": claims_dynamic, "get_vocab_size": VOCAB, "get_eos_ids": [2]}

    def build():
        torch.manual_seed(0)
        model = KVStep(llama_transformer(use_kv_cache=True, enable_dynamic_shape=False, vocab_size=VOCAB))
        return ExportSpec(model, (torch.tensor([[3]]), torch.tensor([0])), constant_methods=metadata,
                          config={"external_constants": True} if external else {})

    kind = ("claims-dynamic" if claims_dynamic else "static") + ("-ptd" if external else "")
    name = f"llm-llama-one-token-{kind}-v2"
    return export_program(name, build)


@dataclass
class Run:
    """What one generate call passed to its callbacks."""

    pieces: list[str] = field(default_factory=list)
    stats: list = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def generate(runner, prompt: str, config) -> Run:
    run = Run()
    runner.generate(prompt, config, run.pieces.append, run.stats.append)
    return run


@pytest.fixture(scope="session")
def executorch_runner():
    """ExecuTorch's TextLLMRunner (with its llama:: kernels) and the seed its sampler took, per program."""
    llm = pytest.importorskip("executorch.extension.llm.runner")
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")

    def make(pte, tokenizer):
        # Its sampler is seeded with time(nullptr) when the runner is made: one second on both sides.
        while True:
            before = int(time.time())
            runner = llm.TextLLMRunner(str(pte), str(tokenizer))
            if int(time.time()) == before:
                return runner, before

    return make


@pytest.fixture(scope="session", params=MODELS)
def multimodal(request) -> MultimodalProgram:
    """Each multimodal program (tests/support/multimodal_programs.py)."""
    return multimodal_program(request.param)


@pytest.fixture(scope="session")
def llava() -> MultimodalProgram:
    return multimodal_program("llava")


@pytest.fixture(scope="session")
def llava_example() -> MultimodalProgram:
    """LLaVA as ExecuTorch's example exports it: uint8 images, llama::custom_sdpa, a start position."""
    return multimodal_program("llava-executorch")


@pytest.fixture(scope="session")
def voxtral() -> MultimodalProgram:
    return multimodal_program("voxtral")


@pytest.fixture(scope="session")
def executorch_multimodal_runner():
    """ExecuTorch's MultimodalRunner (with its llama:: kernels) and the seed its sampler took."""
    llm = pytest.importorskip("executorch.extension.llm.runner")
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")

    def make(program: MultimodalProgram):
        while True:
            before = int(time.time())
            runner = llm.MultimodalRunner(str(program.pte), str(program.tokenizer))
            if int(time.time()) == before:
                return runner, before

    return make
