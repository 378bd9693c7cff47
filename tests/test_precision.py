"""The compute dtype rule: bf16 only where the hardware computes it natively."""
import pytest
import torch

from mascot import precision


def test_auto_is_bf16_only_where_the_hardware_is_native(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.compute_dtype("auto") is torch.bfloat16
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    assert precision.compute_dtype("auto") is torch.float32
    assert precision.compute_dtype("bfloat16") is torch.bfloat16  # a named dtype is obeyed
    assert precision.compute_dtype("float32") is torch.float32


def test_an_unknown_dtype_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="auto, float32 or bfloat16"):
        precision.compute_dtype("float16")


def test_the_endpoint_default_is_auto_and_the_choices_are_checked():
    from pydantic import ValidationError

    from mascot.config import LLMEndpoint

    assert LLMEndpoint(model="m").dtype == "auto"
    with pytest.raises(ValidationError, match="dtype"):
        LLMEndpoint(model="m", dtype="half")


def test_a_frozen_head_gets_a_contiguous_input_and_the_same_logits(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    model.requires_grad_(False)  # as LoRA and a merged adapter leave it
    ids = torch.randint(5, 100, (3, 17))
    with torch.no_grad():
        before = model(input_ids=ids, logits_to_keep=4).logits
    precision.contiguous_head_input(model)
    seen = []
    model.get_output_embeddings().register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    with torch.no_grad():
        after = model(input_ids=ids, logits_to_keep=4).logits
    assert seen == [True] and torch.equal(before, after)


def test_the_one_loader_gives_the_dtype_asked_and_a_contiguous_head_input(tiny_model_dir):
    model = precision.load_causal_lm(str(tiny_model_dir), torch.bfloat16)
    seen = []
    model.get_output_embeddings().register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    with torch.no_grad():
        model(input_ids=torch.randint(5, 100, (2, 9)), logits_to_keep=3)
    assert model.dtype == torch.bfloat16 and seen == [True]
