"""The dtype models compute in: bf16 where the hardware computes it natively, fp32 elsewhere.

Native means a CUDA GPU that supports bf16, or a CPU with AVX512-BF16 or AMX. There bf16 runs the 2-core
development VM's matmuls at 4x fp32's rate. benchmarks/engines.py measured generation 2.6x and the judge 2.8x
faster, with identical judge_check figures. Elsewhere bf16 is emulated (slow; not measured here), so the rule
asks the hardware rather than naming a dtype. An in-process LLM says on stderr which it chose; a training run's
`bf16` is among the trainer arguments its MLflow run records. Also here: `contiguous_head_input`, a PyTorch trap
in how a frozen LM head computes, and `load_causal_lm`, the one loader of a causal LM this project computes with.
"""
from __future__ import annotations

from functools import cache

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@cache
def native_bf16() -> bool:
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(cpu, "_is_amx_tile_supported", lambda: False)())


def compute_dtype(name: str = "auto") -> torch.dtype:
    """`auto`: bf16 where native, else fp32; `float32` / `bfloat16`: that dtype."""
    if name == "auto":
        return torch.bfloat16 if native_bf16() else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r}: use auto, float32 or bfloat16")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def contiguous_head_input(model) -> None:
    """Feed the LM head a contiguous input. A causal LM slices its last hidden states (`logits_to_keep`) before
    the head; with the head's weight frozen (a LoRA policy, a merged adapter), torch.matmul will not fold that
    strided 3-D slice into one matrix product and instead runs a batched one over a copy of the whole
    vocabulary-by-hidden weight per row: on Gemma's 262k vocabulary, 2.3 s of a 2.9 s prefill of 4 x 302
    tokens. The same numbers, without the copy (benchmarks/grpo_step.py)."""
    model.get_output_embeddings().register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]))


def load_causal_lm(path: str, dtype: torch.dtype | None = None, adapter_dir: str | None = None):
    """A causal LM as the speaker, the judge, the GRPO policies and the evaluated policies compute with it: in
    `dtype` (default: bf16 where native, fp32 elsewhere), a LoRA adapter merged in fp32 and then cast (one
    rounding), the head fed a contiguous input."""
    from transformers import AutoModelForCausalLM

    dtype = dtype or compute_dtype()
    if adapter_dir:
        from peft import PeftModel

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload().to(dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    contiguous_head_input(model)  # a LoRA policy or a merged adapter leaves the head frozen
    return model
