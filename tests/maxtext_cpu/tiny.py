"""Tiny random Hugging Face checkpoints of the recipes' architectures, for MaxText's real code on a CPU.

Runs inside a MaxText test venv (tests/test_maxtext_real.py calls it with that venv's python):

    python tests/maxtext_cpu/tiny.py OUT_DIR MAXTEXT_MODEL_NAME [SIZES_JSON [SHARD [STD]]]

SIZES_JSON replaces the tiny sizes (in the config's fields, with "vocab_size" in place of VOCAB), e.g. the
real-chip smoke's larger model (bench/chip_smoke/plan.py); SHARD is then the largest shard, STD the weights'
spread. The sizes used are written beside the model (SIZES_FILE), where the chain reads them.

Each config starts from the release's own HF_MODEL_CONFIGS entry (the config to_maxtext and
to_huggingface use for the real model), so that everything but the sizes is the real model's (RoPE,
soft-capping, layer pattern, tied embeddings, the Gemma 4 vision tower), and shrinks its sizes
(tiny_sizes): a model MaxText knows needs no entry here, only a tokenizer family in SPECIALS.
The checkpoint is written as the hub's are: sharded safetensors with model.safetensors.index.json, a
tokenizer.json that needs no download (byte-level BPE over 256 bytes plus the model's special tokens)
and a chat template. MaxText gets the same sizes on its command line (maxtext_overrides, with
override_model_config=True); to_maxtext and to_huggingface take the rest from HF_MODEL_CONFIGS, which
tests/maxtext_cpu/run.py points at this config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 512  # a multiple of 128, as MaxText pads vocabularies; the tokenizer uses the first 256 + specials
SEED = 0
SHARD = "150KB"  # small enough that every tiny model has at least two shards
STD = 0.5  # wide enough that a swapped or transposed tensor shows in the logits

# The tiny sizes, derived from the model's own config (its text config for a multimodal one): each field the
# config has gets its tiny value, so a new model needs no entry here. Gemma 4's global attention needs
# num_global_key_value_heads >= the tensor axis (2) of the recipe's mesh.
TINY_FIELDS = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
               "global_head_dim": 32, "num_global_key_value_heads": 2, "num_experts": 8, "num_local_experts": 8,
               "num_experts_per_tok": 2, "top_k_experts": 2, "moe_intermediate_size": 32}
EXPERTS = ("num_experts", "num_local_experts")  # Qwen3-MoE's config calls them num_local_experts
PER_TOKEN = ("num_experts_per_tok", "top_k_experts")
LAYERS = 2
# Hugging Face field -> MaxText key (configs/models/<name>.yml and base.yml).
MAXTEXT_KEY = {
    "hidden_size": "base_emb_dim", "num_attention_heads": "base_num_query_heads",
    "num_key_value_heads": "base_num_kv_heads", "head_dim": "head_dim", "global_head_dim": "global_head_dim",
    "num_global_key_value_heads": "global_num_kv_heads", "num_hidden_layers": "base_num_decoder_layers",
    "intermediate_size": "base_mlp_dim", "num_experts": "num_experts", "num_local_experts": "num_experts",
    "num_experts_per_tok": "num_experts_per_tok", "top_k_experts": "num_experts_per_tok",
    "moe_intermediate_size": "base_moe_mlp_dim",
}
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
               "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 16, "position_embedding_size": 64}
SIZES_FILE = "tiny-sizes.json"  # what build used, in the config's fields plus vocab_size, beside the model

# Special tokens (first ids of the vocabulary) and chat templates, in each family's own form, by the
# config's model_type less a _moe suffix.
SPECIALS = {
    "qwen3": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
              "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "gemma4": (["<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|image|>", "<|image>", "<image|>",
                "<|video|>", "<|audio|>", "<|audio>", "<audio|>"],
               {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
               "{{ bos_token }}{% for m in messages %}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>\n"
               "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}"),
    "llama": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|eot_id|>"],
              {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"},
              "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
              "{{ m['content'] }}<|eot_id|>{% endfor %}"
              "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"),
}


def base_name(maxtext_name: str) -> str:
    """to_maxtext loads the base architecture for an -Instruct name (to_maxtext.py main)."""
    return maxtext_name.replace("-Instruct", "")


def tiny_sizes(text: dict) -> dict[str, int]:
    """The tiny sizes of a model from its (text) config: TINY_FIELDS where the config has the field; as many
    layers as reach its first full-attention layer, at least LAYERS; a dense MLP twice as wide as the model,
    or beside experts as wide as the experts one token uses together; the vocabulary VOCAB."""
    sizes = {field: value for field, value in TINY_FIELDS.items() if field in text}
    full = [i for i, kind in enumerate(text.get("layer_types") or []) if kind == "full_attention"]
    sizes["num_hidden_layers"] = max(LAYERS, full[0] + 1 if full else 0)
    experts = next((sizes[field] for field in PER_TOKEN if field in sizes), 0)
    if "intermediate_size" in text:
        sizes["intermediate_size"] = (sizes["moe_intermediate_size"] * experts if experts
                                      else 2 * sizes["hidden_size"])
    return dict(sizes, vocab_size=VOCAB)


def recorded_sizes(tiny_dir: str | Path) -> dict[str, int]:
    """The sizes a tiny model was built with (SIZES_FILE)."""
    return json.loads((Path(tiny_dir) / SIZES_FILE).read_text())


def has_experts(sizes: dict[str, int]) -> bool:
    return any(field in sizes for field in EXPERTS)


def maxtext_overrides(sizes: dict[str, int]) -> list[str]:
    """The sizes as MaxText command-line overrides (they need override_model_config=True)."""
    full = dict(sizes)
    vocab = full.pop("vocab_size")
    return [*(f"{MAXTEXT_KEY[field]}={value}" for field, value in full.items()), f"vocab_size={vocab}",
            "override_model_config=True"]


def _real_config(maxtext_name: str) -> dict:
    """The release's HF_MODEL_CONFIGS entry of the model, as a dict."""
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    return HF_MODEL_CONFIGS[base_name(maxtext_name)].to_dict()


def _tokenizer(maxtext_name: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    family = _real_config(maxtext_name)["model_type"].removesuffix("_moe")
    if family not in SPECIALS:
        raise SystemExit(f"{maxtext_name}: no tiny tokenizer for model family '{family}': add it to SPECIALS")
    specials, roles, template = SPECIALS[family]
    vocab = {token: i for i, token in enumerate(specials)}
    for char in bytes_to_unicode().values():
        vocab[char] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, chat_template=template,
                                   **{k: v for k, v in roles.items() if v})
    return fast, {name.replace("_token", "_token_id"): (vocab[v] if v else None) for name, v in roles.items()}


def tiny_config(maxtext_name: str, token_ids: dict, sizes: dict[str, int] | None = None):
    """The release's HF_MODEL_CONFIGS entry with the tiny sizes (or `sizes`: the config's fields plus
    vocab_size); returns it with the sizes it took."""
    import transformers

    real = _real_config(maxtext_name)
    text = real.get("text_config", real)  # Gemma 4: a multimodal config around the text model
    sizes = dict(sizes) if sizes else tiny_sizes(text)
    text.update(sizes)
    # A size given under one name of a group (bench/chip_smoke's num_experts) also replaces the config's own
    # name for it: transformers 5 reads Qwen3-MoE's num_local_experts over its num_experts alias.
    for group in (EXPERTS, PER_TOKEN):
        given = next((sizes[field] for field in group if field in sizes), None)
        text.update({field: given for field in group if given is not None and field in text})
    if "layer_types" in text:
        text["layer_types"] = text["layer_types"][:sizes["num_hidden_layers"]]
    if "max_window_layers" in text:
        text["max_window_layers"] = sizes["num_hidden_layers"]
    if "text_config" in real:
        text["vocab_size_per_layer_input"] = sizes["vocab_size"]
        text.update({k: v for k, v in token_ids.items() if v is not None})
        real["vision_config"].update(TINY_VISION)
        # The multimodal token ids must lie inside the tiny vocabulary (tokens 5..11 of SPECIALS).
        for offset, key in enumerate(["image_token_id", "boi_token_id", "eoi_token_id", "video_token_id",
                                      "audio_token_id", "boa_token_id", "eoa_token_id"]):
            real[key] = 5 + offset
        real["eoa_token_index"] = real["eoa_token_id"]
        real["eos_token_id"] = token_ids["eos_token_id"]
    else:
        real.update(token_ids)
    real.pop("transformers_version", None)
    return transformers.AutoConfig.for_model(real.pop("model_type"), **real), sizes


def build(out: Path, maxtext_name: str, sizes: dict[str, int] | None = None, shard: str = SHARD,
          std: float = STD) -> None:
    import torch
    import transformers

    tokenizer, token_ids = _tokenizer(maxtext_name)
    config, sizes = tiny_config(maxtext_name, token_ids, sizes)
    torch.manual_seed(SEED)
    if config.architectures:  # Qwen3-MoE and Gemma 4 name theirs; MaxText's Llama configs do not
        model = getattr(transformers, config.architectures[0])(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16).eval()
    with torch.no_grad():  # some inits leave zeros or ones; random values make every mapping visible
        for param in model.parameters():
            param.copy_(torch.randn_like(param, dtype=torch.float32).mul_(std).to(param.dtype))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size=shard)
    tokenizer.save_pretrained(out)
    (out / SIZES_FILE).write_text(json.dumps(sizes, sort_keys=True))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2:
        raise SystemExit(f"{maxtext_name}: one shard only; lower SHARD so the index is exercised")
    print(json.dumps({"model": maxtext_name, "architecture": type(model).__name__, "shards": len(shards),
                      "tensors": len(index["weight_map"]),
                      "parameters": sum(param.numel() for param in model.parameters())}))


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2], *([json.loads(sys.argv[3])] if len(sys.argv) > 3 else []), *sys.argv[4:5],
          *map(float, sys.argv[5:6]))
