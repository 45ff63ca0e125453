"""The dev workloads by name: model builder, batch maker, loss -- the same definitions that were
measured on the H100 (benchmarks/data/), so a predictor is asked about the very same model and batch.

Each workload is a name -> (build_model, make_batch(device, dtype_for_floats), loss_fn); models build
on CPU or on the meta device (random weights, from configs: no hub downloads).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def _vision(builder, batch, res=224, classes=1000):
    def make_model():
        return builder()

    def make_batch(device, float_dtype=torch.float32):
        x = torch.randn(batch, 3, res, res, device=device, dtype=float_dtype)
        y = torch.randint(0, classes, (batch,), device=device)
        return x, y

    def loss_fn(model, b):
        x, y = b
        return F.cross_entropy(model(x), y)

    return make_model, make_batch, loss_fn


def _lm(config_fn, batch, seq, vocab):
    def make_model():
        return config_fn()

    def make_batch(device, float_dtype=torch.float32):
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        return (ids,)

    def loss_fn(model, b):
        (ids,) = b
        out = model(input_ids=ids, labels=ids)
        return out.loss

    return make_model, make_batch, loss_fn


class MLP(nn.Module):
    def __init__(self, width, depth, d_in, classes):
        super().__init__()
        layers = [nn.Linear(d_in, width), nn.GELU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.GELU()]
        layers += [nn.Linear(width, classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def _mlp(width, depth, batch, d_in=1024, classes=1000):
    def make_model():
        return MLP(width, depth, d_in, classes)

    def make_batch(device, float_dtype=torch.float32):
        return (torch.randn(batch, d_in, device=device, dtype=float_dtype),
                torch.randint(0, classes, (batch,), device=device))

    def loss_fn(model, b):
        x, y = b
        return F.cross_entropy(model(x), y)

    return make_model, make_batch, loss_fn


def _tv(name, **kw):
    def b():
        import torchvision.models as m
        return getattr(m, name)(**kw)
    return b


def _gpt2(n_layer, n_embd, n_head, n_positions=1024, vocab=50257):
    def b():
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=n_positions,
                         vocab_size=vocab, attn_implementation="sdpa")
        return GPT2LMHeadModel(cfg)
    return b


def _bert(layers, hidden, heads, inter, vocab=30522, max_pos=512):
    def b():
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                         intermediate_size=inter, vocab_size=vocab, max_position_embeddings=max_pos,
                         attn_implementation="sdpa")
        return BertForMaskedLM(cfg)
    return b


def _llama(layers, hidden, heads, inter, kv_heads=None, vocab=32000, max_pos=4096):
    def b():
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                          num_key_value_heads=kv_heads or heads, intermediate_size=inter,
                          vocab_size=vocab, max_position_embeddings=max_pos, attn_implementation="sdpa")
        return LlamaForCausalLM(cfg)
    return b


def _t5(d_model, d_ff, layers, heads, vocab=32128):
    def b():
        from transformers import T5Config, T5ForConditionalGeneration
        cfg = T5Config(d_model=d_model, d_ff=d_ff, num_layers=layers, num_heads=heads, vocab_size=vocab,
                       decoder_start_token_id=0, pad_token_id=0)
        return T5ForConditionalGeneration(cfg)
    return b


def _t5_lm(builder, batch, seq, vocab=32128):
    def make_batch(device, float_dtype=torch.float32):
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        return (ids,)

    def loss_fn(model, b):
        (ids,) = b
        return model(input_ids=ids, labels=ids[:, : seq // 4].contiguous()).loss

    return builder, make_batch, loss_fn


WORKLOADS = {
    # name: (builder, batch maker, loss) -- full size, for a GPU
    "resnet18_b256": _vision(_tv("resnet18"), 256),
    "mobilenet_v3_large_b256": _vision(_tv("mobilenet_v3_large"), 256),
    "vgg16_b64": _vision(_tv("vgg16"), 64),
    "bert_base_b32_s512": _lm(_bert(12, 768, 12, 3072), 32, 512, 30522),
    "gpt2_small_b16_s1024": _lm(_gpt2(12, 768, 12), 16, 1024, 50257),
    "llama_400m_b8_s2048": _lm(_llama(16, 1024, 16, 2816), 8, 2048, 32000),
    "mlp_wide_b4096": _mlp(8192, 4, 4096),
    "mlp_small_b64": _mlp(256, 6, 64, d_in=256, classes=10),
}

class GRULM(nn.Module):
    """A recurrent language model: embedding, a cuDNN GRU stack, a vocabulary head."""

    def __init__(self, vocab, dim, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)


def _gru_lm(batch, seq, vocab=8000, dim=256, hidden=768, layers=3):
    def make_model():
        return GRULM(vocab, dim, hidden, layers)

    def make_batch(device, float_dtype=torch.float32):
        return (torch.randint(0, vocab, (batch, seq), device=device),)

    def loss_fn(model, b):
        (ids,) = b
        logits = model(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))

    return make_model, make_batch, loss_fn


def _qwen2(layers, hidden, heads, kv_heads, inter, vocab=32000):
    def b():
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                          num_key_value_heads=kv_heads, intermediate_size=inter, vocab_size=vocab,
                          max_position_embeddings=4096, attn_implementation="sdpa")
        return Qwen2ForCausalLM(cfg)
    return b


# Second dev set (2026-11-22): more families -- a hybrid convolution-attention net, shuffled and
# squeezed convolutions, a recurrent LM, grouped-query attention.
WORKLOADS.update({
    "maxvit_t_b64": _vision(_tv("maxvit_t"), 64),
    "shufflenet_v2_b256": _vision(_tv("shufflenet_v2_x1_0"), 256),
    "squeezenet1_1_b256": _vision(_tv("squeezenet1_1"), 256),
    "gru_lm_b32_s512": _gru_lm(32, 512),
    "qwen2_gqa_200m_b4_s2048": _lm(_qwen2(12, 1024, 16, 2, 3072), 4, 2048, 32000),
})


# Tiny versions of a few, to smoke-test the harness on a CPU.
SMOKE = {
    "resnet18_tiny": _vision(_tv("resnet18"), 2, res=64),
    "gpt2_tiny": _lm(_gpt2(2, 64, 2, n_positions=128, vocab=1000), 2, 64, 1000),
    "llama_tiny": _lm(_llama(2, 64, 4, 128, vocab=1000, max_pos=128), 2, 64, 1000),
    "t5_tiny": _t5_lm(_t5(64, 128, 2, 2, vocab=1000), 2, 32, vocab=1000),
    "mlp_tiny": _mlp(64, 2, 8, d_in=32, classes=10),
}
