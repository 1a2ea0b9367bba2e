"""Real-world nn.Modules not written for this project, for the torch.compile coverage benchmark.

Architectures from the `transformers` package (tiny configs, random weights, nothing downloaded)
and building blocks that ship with torch. Each factory returns (module in eval mode, kwargs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

SEQ, VOCAB = 16, 128
TOKENS = {"vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": False}
TEXT = {**TOKENS, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64}
DECODER = {**TEXT, "num_key_value_heads": 1, "head_dim": 16}
VISION = {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64}
SEQ2SEQ = {**TOKENS, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
           "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
           "decoder_start_token_id": 2}
AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
         "conv_dim": (16, 16), "conv_kernel": (10, 3), "conv_stride": (5, 2), "num_conv_pos_embeddings": 16,
         "num_conv_pos_embedding_groups": 2, "do_stable_layer_norm": False}
GPT = {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64, "use_cache": False}
T5 = {"vocab_size": VOCAB, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_heads": 2, "use_cache": False,
      "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
CONV = {"num_channels": 3, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2}


def _ids(n: int = SEQ, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(3, vocab, (1, n), generator=torch.Generator().manual_seed(1))


def _text(**extra: Any) -> dict:
    return {"input_ids": _ids(), **extra}


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def _pixels(size: int = 32) -> dict:
    return {"pixel_values": _randn(1, 3, size, size)}


def _audio(n: int = 1600) -> dict:
    return {"input_values": _randn(1, n)}


def _seq2seq() -> dict:
    return {"input_ids": _ids(), "decoder_input_ids": _ids(8)}


def hf(cls_name: str, inputs: Callable[[], dict], part: str | None = None, **config: Any) -> Callable[[], tuple]:
    """Factory of a transformers model built from a tiny config (random weights); `part`: a method giving a submodel."""

    def make() -> tuple[nn.Module, dict]:
        import transformers

        cls = getattr(transformers, cls_name)
        torch.manual_seed(0)
        model = cls(cls.config_class(**config))
        if part:
            model = getattr(model, part)()
        return model.eval(), inputs()

    return make


def torch_nn(build: Callable[[], nn.Module], *shapes: tuple[int, ...]) -> Callable[[], tuple]:
    def make() -> tuple[nn.Module, dict]:
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1)
        return build().eval(), {f"x{i}": torch.randn(*s, generator=gen) for i, s in enumerate(shapes)}

    return make


class _Args(nn.Module):
    """Calls a module with positional inputs (torch.nn modules take no keyword names x0, x1, ...)."""

    def __init__(self, inner: nn.Module, first_only: bool = False):
        super().__init__()
        self.inner, self.first_only = inner, first_only

    def forward(self, **kw: torch.Tensor) -> Any:
        out = self.inner(*kw.values())
        return out[0] if self.first_only else out


def _nn(module: Callable[[], nn.Module], *shapes: tuple[int, ...], first_only: bool = False) -> Callable[[], tuple]:
    return torch_nn(lambda: _Args(module(), first_only), *shapes)


ZOO: dict[str, Callable[[], tuple]] = {
    # text encoders
    "BertModel": hf("BertModel", _text, **TEXT),
    "RobertaModel": hf("RobertaModel", _text, **TEXT),
    "DistilBertModel": hf("DistilBertModel", _text, vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                          max_position_embeddings=64),
    "AlbertModel": hf("AlbertModel", _text, **TEXT, embedding_size=16),
    "ElectraModel": hf("ElectraModel", _text, **TEXT, embedding_size=16),
    "DebertaModel": hf("DebertaModel", _text, **TEXT),
    "DebertaV2Model": hf("DebertaV2Model", _text, **TEXT),
    "XLMRobertaModel": hf("XLMRobertaModel", _text, **TEXT),
    "MobileBertModel": hf("MobileBertModel", _text, **TEXT, embedding_size=16, intra_bottleneck_size=16,
                          true_hidden_size=16, num_feedforward_networks=2),
    "SqueezeBertModel": hf("SqueezeBertModel", _text, **TEXT, embedding_size=32, q_groups=2, k_groups=2, v_groups=2,
                           post_attention_groups=2, intermediate_groups=2, output_groups=2),
    "FunnelModel": hf("FunnelModel", _text, vocab_size=VOCAB, d_model=32, n_head=2, d_head=16, d_inner=64,
                      block_sizes=[1, 1], num_decoder_layers=1),
    "LongformerModel": hf("LongformerModel", _text, **TEXT, attention_window=8),
    "LayoutLMModel": hf("LayoutLMModel", _text, **TEXT),
    "ConvBertModel": hf("ConvBertModel", _text, **TEXT, embedding_size=32),
    "MPNetModel": hf("MPNetModel", _text, **TEXT),
    "RoFormerModel": hf("RoFormerModel", _text, **TEXT, embedding_size=32),
    "ErnieModel": hf("ErnieModel", _text, **TEXT),
    "MegatronBertModel": hf("MegatronBertModel", _text, **TEXT),
    "RemBertModel": hf("RemBertModel", _text, **TEXT, input_embedding_size=16, output_embedding_size=16),
    "ModernBertModel": hf("ModernBertModel", _text, **TEXT, global_attn_every_n_layers=2, local_attention=8),
    "NystromformerModel": hf("NystromformerModel", _text, **TEXT, num_landmarks=4, segment_means_seq_len=SEQ),
    "FNetModel": hf("FNetModel", _text, **TEXT),
    "XLNetModel": hf("XLNetModel", _text, vocab_size=VOCAB, d_model=32, n_layer=2, n_head=2, d_inner=64,
                     use_mems_eval=False),
    "CanineModel": hf("CanineModel", _text, **TEXT, downsampling_rate=4, num_hash_buckets=64),
    # decoders
    "GPT2Model": hf("GPT2Model", _text, **GPT),
    "GPTNeoModel": hf("GPTNeoModel", _text, vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2,
                      attention_types=[[["global", "local"], 1]], window_size=8, max_position_embeddings=64,
                      use_cache=False),
    "GPTJModel": hf("GPTJModel", _text, **GPT, rotary_dim=8),
    "GPTNeoXModel": hf("GPTNeoXModel", _text, **DECODER),
    "GPTBigCodeModel": hf("GPTBigCodeModel", _text, **GPT),
    "OPTModel": hf("OPTModel", _text, **TEXT, ffn_dim=64, word_embed_proj_dim=32),
    "BloomModel": hf("BloomModel", _text, vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2, use_cache=False),
    "FalconModel": hf("FalconModel", _text, **TEXT, new_decoder_architecture=True, num_kv_heads=1),
    "LlamaModel": hf("LlamaModel", _text, **DECODER),
    "MistralModel": hf("MistralModel", _text, **DECODER, sliding_window=8),
    "Qwen2Model": hf("Qwen2Model", _text, **DECODER),
    "Qwen3Model": hf("Qwen3Model", _text, **DECODER),
    "GemmaModel": hf("GemmaModel", _text, **DECODER),
    "Gemma2Model": hf("Gemma2Model", _text, **DECODER, sliding_window=8),
    "PhiModel": hf("PhiModel", _text, **DECODER),
    "Phi3Model": hf("Phi3Model", _text, **DECODER),
    "StableLmModel": hf("StableLmModel", _text, **DECODER),
    "Starcoder2Model": hf("Starcoder2Model", _text, **DECODER),
    "OlmoModel": hf("OlmoModel", _text, **DECODER),
    "CodeGenModel": hf("CodeGenModel", _text, **GPT, rotary_dim=8),
    "BioGptModel": hf("BioGptModel", _text, **TEXT),
    "XGLMModel": hf("XGLMModel", _text, vocab_size=VOCAB, d_model=32, num_layers=2, attention_heads=2, ffn_dim=64,
                    max_position_embeddings=64, use_cache=False),
    "MptModel": hf("MptModel", _text, vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, max_seq_len=64,
                   use_cache=False),
    "MixtralModel": hf("MixtralModel", _text, **DECODER, num_local_experts=4, num_experts_per_tok=2),
    "CTRLModel": hf("CTRLModel", _text, **GPT, dff=64),
    # encoder-decoders
    "T5Model": hf("T5Model", _seq2seq, **T5),
    "BartModel": hf("BartModel", _seq2seq, **SEQ2SEQ),
    "MBartModel": hf("MBartModel", _seq2seq, **SEQ2SEQ),
    "PegasusModel": hf("PegasusModel", _seq2seq, **SEQ2SEQ),
    "MarianModel": hf("MarianModel", _seq2seq, **SEQ2SEQ),
    "BlenderbotModel": hf("BlenderbotModel", _seq2seq, **SEQ2SEQ),
    "M2M100Model": hf("M2M100Model", _seq2seq, **SEQ2SEQ),
    # vision
    "ViTModel": hf("ViTModel", _pixels, **VISION),
    "DeiTModel": hf("DeiTModel", _pixels, **VISION),
    "BeitModel": hf("BeitModel", _pixels, **VISION),
    "Dinov2Model": hf("Dinov2Model", _pixels, **VISION),
    "Data2VecVisionModel": hf("Data2VecVisionModel", _pixels, **VISION),
    "YolosModel": hf("YolosModel", _pixels, **{**VISION, "image_size": [32, 32]}, num_detection_tokens=4),
    "CLIPVisionModel": hf("CLIPVisionModel", _pixels, **VISION),
    "CLIPTextModel": hf("CLIPTextModel", _text, **TEXT),
    "SiglipVisionModel": hf("SiglipVisionModel", _pixels, **VISION),
    "ConvNextModel": hf("ConvNextModel", _pixels, **CONV),
    "ConvNextV2Model": hf("ConvNextV2Model", _pixels, **CONV),
    "ResNetModel": hf("ResNetModel", _pixels, **CONV, embedding_size=16),
    "RegNetModel": hf("RegNetModel", _pixels, **CONV, embedding_size=16, groups_width=8),
    "MobileNetV2Model": hf("MobileNetV2Model", _pixels, image_size=32, depth_multiplier=0.25),
    "MobileViTModel": hf("MobileViTModel", _pixels, image_size=32, hidden_sizes=[16, 24, 32],
                         neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    "SwinModel": hf("SwinModel", _pixels, image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                    window_size=4),
    "SegformerModel": hf("SegformerModel", _pixels, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                         hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                         mlp_ratios=[2, 2]),
    "PoolFormerModel": hf("PoolFormerModel", _pixels, hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2,
                          patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1]),
    "LevitModel": hf("LevitModel", _pixels, image_size=32, hidden_sizes=[32, 48], num_attention_heads=[2, 3],
                     depths=[1, 1], key_dim=[8, 8], down_ops=[["Subsample", 8, 2, 4, 2, 2]]),
    # audio
    "Wav2Vec2Model": hf("Wav2Vec2Model", _audio, **AUDIO),
    "HubertModel": hf("HubertModel", _audio, **AUDIO),
    "WavLMModel": hf("WavLMModel", _audio, **AUDIO, num_buckets=16, max_bucket_distance=32),
    "Data2VecAudioModel": hf("Data2VecAudioModel", _audio, **AUDIO, conv_pos_kernel_size=5),
    "WhisperEncoder": hf("WhisperModel", lambda: {"input_features": _randn(1, 16, 64)}, part="get_encoder",
                         **SEQ2SEQ, num_mel_bins=16, max_source_positions=32, max_target_positions=32),
    "ASTModel": hf("ASTModel", lambda: {"input_values": _randn(1, 32, 16)}, **VISION, frequency_stride=4,
                   time_stride=4, max_length=32, num_mel_bins=16),
    # torch.nn building blocks
    "nn.TransformerEncoder": _nn(lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False),
        (1, SEQ, 32)),
    "nn.TransformerDecoder": _nn(lambda: nn.TransformerDecoder(
        nn.TransformerDecoderLayer(32, 2, 64, dropout=0.0, batch_first=True), 2), (1, 8, 32), (1, SEQ, 32)),
    "nn.Transformer": _nn(lambda: nn.Transformer(32, 2, 1, 1, 64, dropout=0.0, batch_first=True),
                          (1, SEQ, 32), (1, 8, 32)),
    "nn.MultiheadAttention": _nn(lambda: nn.MultiheadAttention(32, 2, batch_first=True),
                                 (1, SEQ, 32), (1, SEQ, 32), (1, SEQ, 32), first_only=True),
    "nn.LSTM": _nn(lambda: nn.LSTM(16, 32, num_layers=2, batch_first=True), (1, SEQ, 16), first_only=True),
    "nn.GRU": _nn(lambda: nn.GRU(16, 32, num_layers=2, batch_first=True), (1, SEQ, 16), first_only=True),
    "nn.RNN": _nn(lambda: nn.RNN(16, 32, batch_first=True), (1, SEQ, 16), first_only=True),
}
