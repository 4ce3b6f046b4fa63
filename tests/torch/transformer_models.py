"""Plain-torch definitions of meganeura's transformer models, for checking it against PyTorch.

Each module's state_dict names equal meganeura's Hugging Face parameter names, so one safetensors
file of weights loads into both. The interface (imported by the benchmark harness too):

    NAMES = ("smollm2", "smolvla", "whisper")
    build(name, size) -> torch.nn.Module     # size "tiny" (tests) or "full" (published config)
    run(name, module, inputs) -> (output, loss)   # inputs: dict of torch tensors by input name

The configurations mirror src/models/{smollm2,smolvla,whisper}.cpp; the definitions follow
Hugging Face's LlamaModel and WhisperEncoder (RoPE angles formed in float32 like Hugging Face,
whatever dtype the module runs in).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

NAMES = ("smollm2", "smolvla", "whisper")

CONFIGS = {
    "smollm2": {
        "full": dict(hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64, ffn=1536, vocab=49152,
                     rope_theta=100000.0, eps=1e-5),
        "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, vocab=97,
                     rope_theta=100000.0, eps=1e-5),
    },
    "smolvla": {
        "full": dict(hidden=720, layers=16, heads=15, kv_heads=5, head_dim=64, ffn=2048, action_dim=32, chunk=50,
                     time_dim=1440, context=16, context_dim=320, eps=1e-5),
        "tiny": dict(hidden=48, layers=2, heads=3, kv_heads=1, head_dim=16, ffn=64, action_dim=5, chunk=7,
                     time_dim=96, context=4, context_dim=12, eps=1e-5),
    },
    "whisper": {
        "full": dict(mels=80, frames=3000, d=384, layers=4, heads=6, ffn=1536, eps=1e-5),
        "tiny": dict(mels=8, frames=20, d=32, layers=2, heads=4, ffn=64, eps=1e-5),
    },
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def linear(i, o, bias=False):
    return nn.Linear(i, o, bias=bias)


def attention(q, k, v, causal):
    """q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D]: grouped-query softmax attention."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        tq, tk = q.shape[2], k.shape[2]
        hidden = torch.ones(tq, tk, dtype=torch.bool, device=scores.device).triu(tk - tq + 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return scores.softmax(-1) @ v


def split_heads(x, heads, head_dim):
    b, t, _ = x.shape
    return x.view(b, t, heads, head_dim).transpose(1, 2)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, qkv_bias=False):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = linear(hidden, heads * head_dim, qkv_bias)
        self.k_proj = linear(hidden, kv_heads * head_dim, qkv_bias)
        self.v_proj = linear(hidden, kv_heads * head_dim, qkv_bias)
        self.o_proj = linear(heads * head_dim, hidden)

    def forward(self, x, source, causal, rope=None):
        q = split_heads(self.q_proj(x), self.heads, self.head_dim)
        k = split_heads(self.k_proj(source), self.kv_heads, self.head_dim)
        v = split_heads(self.v_proj(source), self.kv_heads, self.head_dim)
        if rope is not None:
            q, k = rope(q), rope(k)
        return self.o_proj(merge_heads(attention(q, k, v, causal)))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = linear(hidden, ffn)
        self.up_proj = linear(hidden, ffn)
        self.down_proj = linear(ffn, hidden)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c.get("qkv_bias", False))
        self.mlp = MLP(c["hidden"], c["ffn"])
        self.input_layernorm = RMSNorm(c["hidden"], c["eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden"], c["eps"])

    def forward(self, x, source=None, causal=False, rope=None):
        h = self.input_layernorm(x)
        x = x + self.self_attn(h, h if source is None else source, causal, rope)
        return x + self.mlp(self.post_attention_layernorm(x))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rope:
    """Hugging Face Llama's rotary embedding: angles in float32, rotate-half pairing."""

    def __init__(self, head_dim, theta, positions, scaling=None):
        steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float()
        inv_freq = 1.0 / (theta ** (steps / head_dim))
        if scaling is not None:
            inv_freq = llama3_scaled(inv_freq, scaling)
        angles = positions.float()[:, None] * inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def __call__(self, x):
        return x * self.cos.to(x.dtype) + rotate_half(x) * self.sin.to(x.dtype)


def llama3_scaled(inv_freq, s):
    """Hugging Face's _compute_llama3_parameters: long wavelengths / factor, the middle band blended."""
    old_len, low, high, factor = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) * ~(wavelen > old_len / low)
    return torch.where(medium, smoothed, scaled)


class LlamaBody(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"], c["eps"])


class SmolLM2(nn.Module):
    """Tied embeddings: the LM head is model.embed_tokens.weight."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = LlamaBody(c)

    def forward(self, input_ids):
        c = self.c
        rope = Rope(c["head_dim"], c["rope_theta"], torch.arange(input_ids.shape[1], device=input_ids.device),
                    c.get("rope_scaling"))
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, causal=True, rope=rope)
        return self.model.norm(x) @ self.model.embed_tokens.weight.t()


class SmolVLAExpert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.action_in_proj = linear(c["action_dim"], c["hidden"])
        self.time_proj = linear(c["time_dim"], c["hidden"])
        self.kv_proj = linear(c["context_dim"], c["hidden"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"], c["eps"])
        self.action_out_proj = linear(c["hidden"], c["action_dim"])

    def forward(self, actions, timestep, vlm_kv):
        x = self.action_in_proj(actions) + self.time_proj(timestep)
        kv = self.kv_proj(vlm_kv)
        for i, layer in enumerate(self.layers):
            x = layer(x, source=None if i % 2 == 0 else kv)
        return self.action_out_proj(self.norm(x))


class WhisperAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = linear(d, d, bias=True)
        self.k_proj = linear(d, d)
        self.v_proj = linear(d, d, bias=True)
        self.out_proj = linear(d, d, bias=True)

    def forward(self, x):
        hd = x.shape[-1] // self.heads
        q, k, v = (split_heads(p(x), self.heads, hd) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.out_proj(merge_heads(attention(q, k, v, causal=False)))


class WhisperLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d"]
        self.self_attn = WhisperAttention(d, c["heads"])
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=c["eps"])
        self.fc1 = linear(d, c["ffn"], bias=True)
        self.fc2 = linear(c["ffn"], d, bias=True)
        self.final_layer_norm = nn.LayerNorm(d, eps=c["eps"])

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d"]
        self.conv1 = nn.Conv1d(c["mels"], d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(c["frames"] // 2, d)
        self.layers = nn.ModuleList(WhisperLayer(c) for _ in range(c["layers"]))
        self.layer_norm = nn.LayerNorm(d, eps=c["eps"])

    def forward(self, input_features):
        x = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).transpose(1, 2)
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class WhisperModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = WhisperEncoder(c)


class Whisper(nn.Module):
    """Only the encoder, under Hugging Face's `model.encoder.` prefix."""

    def __init__(self, c):
        super().__init__()
        self.model = WhisperModel(c)

    def forward(self, input_features):
        return self.model.encoder(input_features)


def build(name, size):
    return build_from(name, CONFIGS[name][size])


def build_from(name, c):
    return {"smollm2": SmolLM2, "smolvla": SmolVLAExpert, "whisper": Whisper}[name](c)


def hf_config(c, model_type):
    """A SmolLM2-shaped configuration as a Hugging Face config.json's fields."""
    return {"model_type": model_type, "hidden_size": c["hidden"], "num_hidden_layers": c["layers"],
            "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"],
            "intermediate_size": c["ffn"], "vocab_size": c["vocab"], "rope_theta": c["rope_theta"],
            "rms_norm_eps": c["eps"], "tie_word_embeddings": True, "max_position_embeddings": 256,
            "hidden_act": "silu", "rope_scaling": c.get("rope_scaling")}


def run(name, module, inputs):
    """(output, loss) as meganeura defines them: SmolLM2's logits and Hugging Face's causal-LM loss
    (labels shifted inside, -100 ignored; "shifted_labels" taken as they are); the others' output
    and the mean of its squares."""
    if name == "smollm2":
        logits = module(inputs["input_ids"].long())
        if "shifted_labels" in inputs:
            scored, labels = logits, inputs["shifted_labels"]
        else:
            scored, labels = logits[:, :-1], inputs["labels"][:, 1:]
        loss = F.cross_entropy(scored.reshape(-1, logits.shape[-1]), labels.long().reshape(-1), ignore_index=-100)
        return logits, loss
    if name == "smolvla":
        out = module(inputs["actions"], inputs["timestep"], inputs["vlm_kv"])
    else:
        out = module(inputs["input_features"])
    return out, out.pow(2).mean()
