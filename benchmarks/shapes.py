"""The model shapes the benchmarks build with random weights (no checkpoint is read), from their published configs, and
the names `rsi-repro estimate` gives them (`rsi_repro.estimate.shape_of`)."""
from pathlib import Path

QWEN3_MOE_30B_A3B = {'architectures': ['Qwen3MoeForCausalLM'], 'model_type': 'qwen3_moe', 'hidden_size': 2048, 'intermediate_size': 6144,
                     'moe_intermediate_size': 768, 'num_hidden_layers': 48, 'num_attention_heads': 32, 'num_key_value_heads': 4,
                     'head_dim': 128, 'num_experts': 128, 'num_experts_per_tok': 8, 'norm_topk_prob': True, 'decoder_sparse_step': 1,
                     'mlp_only_layers': [], 'vocab_size': 151936, 'max_position_embeddings': 40960, 'rope_theta': 1000000.0,
                     'rms_norm_eps': 1e-06, 'hidden_act': 'silu', 'tie_word_embeddings': False, 'attention_bias': False,
                     'bos_token_id': 151643, 'eos_token_id': 151645, 'torch_dtype': 'bfloat16', 'use_cache': False}
# M = Mamba-2, E = MoE, * = attention: 23 + 23 + 6 = 52 layers, 31.6 B parameters
NEMOTRON_H_PATTERN = 'MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME'
NEMOTRON_H_30B_A3B = {'architectures': ['NemotronHForCausalLM'], 'model_type': 'nemotron_h', 'hidden_size': 2688, 'vocab_size': 131072,
                      'layers_block_type': [{'M': 'mamba', 'E': 'moe', '*': 'attention'}[c] for c in NEMOTRON_H_PATTERN],
                      'num_attention_heads': 32, 'num_key_value_heads': 2, 'head_dim': 128, 'mamba_num_heads': 64, 'mamba_head_dim': 64,
                      'ssm_state_size': 128, 'n_groups': 8, 'conv_kernel': 4, 'chunk_size': 128, 'n_routed_experts': 128,
                      'num_experts_per_tok': 6, 'moe_intermediate_size': 1856, 'moe_shared_expert_intermediate_size': 3712,
                      'n_shared_experts': 1, 'intermediate_size': 3712, 'max_position_embeddings': 8192, 'use_cache': False}
# small shapes of the same kinds: a smoke test of this script (CPU or GPU) before the large ones
TINY_QWEN3_MOE = {**QWEN3_MOE_30B_A3B, 'hidden_size': 128, 'moe_intermediate_size': 64, 'num_hidden_layers': 2, 'num_attention_heads': 4,
                  'num_key_value_heads': 2, 'head_dim': 32, 'num_experts': 8, 'num_experts_per_tok': 2, 'vocab_size': 4096}
TINY_NEMOTRON_H = {**NEMOTRON_H_30B_A3B, 'hidden_size': 256, 'vocab_size': 4096, 'layers_block_type': ['mamba', 'moe', 'attention', 'mamba'],
                   'num_attention_heads': 8, 'num_key_value_heads': 2, 'head_dim': 32, 'mamba_num_heads': 8, 'mamba_head_dim': 64,
                   'ssm_state_size': 64, 'n_groups': 2, 'chunk_size': 64, 'n_routed_experts': 8, 'num_experts_per_tok': 2,
                   'moe_intermediate_size': 128, 'moe_shared_expert_intermediate_size': 256, 'intermediate_size': 256}
# the 30B layout with 16 routed experts instead of 128 (every width and layer, top-6 routing, so the same matrix work a
# token; 5.9 B parameters): an A/B of the same code on a card that cannot hold the 30B layout's 63 GB of weights. Prices nothing.
NEMOTRON_H_E16 = {**NEMOTRON_H_30B_A3B, 'n_routed_experts': 16}
SHAPES = {'qwen3-moe-30b-a3b': ('qwen3_moe', QWEN3_MOE_30B_A3B), 'nemotron-h-31b': ('nemotron_h', NEMOTRON_H_30B_A3B),
          'nemotron-h-31b-e16': ('nemotron_h', NEMOTRON_H_E16),
          'tiny-qwen3-moe': ('qwen3_moe', TINY_QWEN3_MOE), 'tiny-nemotron-h': ('nemotron_h', TINY_NEMOTRON_H)}
# The shape names rate keys use (rsi_repro.estimate.shape_of: architecture and size from a base's name, so the nemotron
# profile's NVIDIA-Nemotron-3.5-Lightning-30B-A3B base asks for 'nemotron_h-30b-a3b'), and what each shape is, in words.
# The tiny shapes price nothing.
ESTIMATE_SHAPES = {'qwen3-moe-30b-a3b': 'qwen3_moe-30b-a3b', 'nemotron-h-31b': 'nemotron_h-30b-a3b'}
# The card those shapes' rates are measured on: the estimate is one machine's bill, so every rate it reads comes from
# one kind of GPU. The 30B layouts' weights (61-63 GB) leave an 80 GB card too little memory for the card's batch split: on an
# H100 the Nemotron-H layout at r=64 trained 3 x 16 at 2,843 tokens/s (2026-12-07), a memory-bound split, not its rate.
ESTIMATE_DEVICE = 'NVIDIA H200'
SHAPE_WORDS = {'qwen3-moe-30b-a3b': 'the Qwen3-MoE 30B-A3B config (48 layers, 128 experts top-8, 30.5 B parameters)',
               'nemotron-h-31b': 'the Nemotron-H 30B-A3B layout (52 layers: 23 Mamba-2, 23 MoE with 128 experts top-6, 6 attention; '
                                 '31.6 B parameters)',
               'nemotron-h-31b-e16': 'the Nemotron-H 30B-A3B layout with 16 routed experts instead of 128 (52 layers, top-6; 5.9 B parameters)'}


def build_config(shape: str, tok, use_cache: bool = False):
    "The shape's transformers config (architecture name, config), with the tokenizer's special ids where the model needs them."
    from transformers import AutoConfig
    arch, cfg = SHAPES[shape]
    cfg = dict(cfg)
    model_type = cfg.pop('model_type'); cfg.pop('architectures', None)
    cfg.update(pad_token_id=tok.pad_token_id, use_cache=use_cache)
    if arch == 'nemotron_h': cfg.update(eos_token_id=tok.eos_token_id, bos_token_id=None)
    return arch, AutoConfig.for_model(model_type, **cfg)
