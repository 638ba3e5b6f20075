#!/usr/bin/python3
"""The PyTorch eager side of benchmarks/side_by_side.sh: Hugging Face's
BertForSequenceClassification and ModernBertForSequenceClassification math in
plain torch (there is no `transformers` package here; config.json's
model_type picks one), trained the way HF Trainer / Accelerate train it, on the
global batches bench_side_by_side printed and the token ids `shardtrain
tokenize` printed.

  HF math, module by module (transformers' modeling_bert.py, eager attention):
    embeddings  word + token_type + position, LayerNorm, dropout
    attention   q/k/v Linear, view [B, L, H, Dh] + permute, q k^T / sqrt(Dh)
                + (1 - mask) * finfo.min, softmax, dropout, x v, permute back
    output      dense, dropout, LayerNorm(x + residual) (after attention and FFN)
    FFN         dense, GELU (erf), dense
    pooler      tanh(dense(hidden[:, 0])); classifier on dropout(pooled)
    loss        cross-entropy (mean)
  ModernBERT (transformers' modeling_modernbert.py, eager attention, padded:
  eager does not unpad):
    embeddings  tok_embeddings, norm (LayerNorm, bias if norm_bias), dropout
    layer       attn_norm (identity in layer 0), Wqkv, RoPE (global_rope_theta
                on every global_attn_every_n_layers-th layer, else
                local_rope_theta), q k^T * Dh^-0.5 + mask (global layers: the
                padding mask; local ones: also |i - j| > local_attention / 2
                masked, the full L x L scores computed), softmax, dropout,
                x v, Wo, dropout, residual; mlp_norm, Wi, act(input) * gate,
                dropout, Wo, residual
    head        final_norm, cls or masked-mean pooling, head (dense, act,
                norm), dropout, classifier
  Training step (HF Trainer): forward, loss.backward() (DDP all-reduces buckets
  when world > 1), clip_grad_norm_(max_grad_norm), AdamW.step() with HF's
  parameter groups (no weight decay on biases and LayerNorm weights),
  zero_grad(). Dynamic padding per rank batch (DataCollatorWithPadding, pad id
  0), rank r of W takes positions r, r+W, ... of each global batch (as
  shardtrain's DistributedSampler hands them out).

Launched by mpirun (rank and world size from OMPI_COMM_WORLD_RANK / _SIZE; the
ranks meet over gloo on 127.0.0.1). Prints one JSON object on rank 0.
Standard library + torch only (Debian python3-torch)."""
import time

PROCESS_START = time.perf_counter()  # before `import torch`: time to first step counts the import

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- model -------------------------------------------------------------------

class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c.get("pad_token_id", 0))
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, input_ids, token_type_ids):
        L = input_ids.shape[1]
        position_ids = torch.arange(L, dtype=torch.long).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        D = c["hidden_size"]
        self.num_heads = c["num_attention_heads"]
        self.head_dim = D // self.num_heads
        self.query = nn.Linear(D, D)
        self.key = nn.Linear(D, D)
        self.value = nn.Linear(D, D)
        self.dropout = nn.Dropout(c["attention_probs_dropout_prob"])

    def heads(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden, mask):
        q, k, v = self.heads(self.query(hidden)), self.heads(self.key(hidden)), self.heads(self.value(hidden))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(hidden.shape)


class AddNorm(nn.Module):  # BertSelfOutput / BertOutput
    def __init__(self, c, inner):
        super().__init__()
        self.dense = nn.Linear(inner, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttention(c)
        self.output = AddNorm(c, c["hidden_size"])

    def forward(self, hidden, mask):
        return self.output(self.self(hidden, mask), hidden)


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c.get("hidden_act", "gelu") == "gelu", "the reference implements hidden_act gelu (erf) only"
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = AddNorm(c, c["intermediate_size"])

    def forward(self, hidden, mask):
        attended = self.attention(hidden, mask)
        return self.output(self.intermediate(attended), attended)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, hidden):
        return torch.tanh(self.dense(hidden[:, 0]))


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)
        self.pooler = Pooler(c)


class BertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = Bert(c)
        p = c.get("classifier_dropout")
        self.dropout = nn.Dropout(c["hidden_dropout_prob"] if p is None else p)
        self.classifier = nn.Linear(c["hidden_size"], c.get("num_labels") or len(c["id2label"]))

    def forward(self, input_ids, token_type_ids, attention_mask):
        hidden = self.bert.embeddings(input_ids, token_type_ids)
        dtype = hidden.dtype
        mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        for layer in self.bert.encoder.layer:
            hidden = layer(hidden, mask)
        return self.classifier(self.dropout(self.bert.pooler(hidden)))


class ModernNorm(nn.Module):  # nn.LayerNorm with an optional bias (torch 1.13's has no bias=False)
    def __init__(self, c):
        super().__init__()
        D = c["hidden_size"]
        self.eps = c["norm_eps"]
        self.weight = nn.Parameter(torch.ones(D))
        self.bias = nn.Parameter(torch.zeros(D)) if c["norm_bias"] else None

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}


class ModernEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c["pad_token_id"])
        self.norm = ModernNorm(c)
        self.drop = nn.Dropout(c["embedding_dropout"])

    def forward(self, input_ids):
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class ModernAttention(nn.Module):
    def __init__(self, c, index):
        super().__init__()
        D = c["hidden_size"]
        self.num_heads = c["num_attention_heads"]
        self.head_dim = D // self.num_heads
        self.is_global = index % c["global_attn_every_n_layers"] == 0
        theta = c["global_rope_theta"] if self.is_global else c["local_rope_theta"]
        self.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)),
                             persistent=False)
        self.Wqkv = nn.Linear(D, 3 * D, bias=c["attention_bias"])
        self.Wo = nn.Linear(D, D, bias=c["attention_bias"])
        self.drop = c["attention_dropout"]
        self.out_drop = nn.Dropout(c["attention_dropout"]) if c["attention_dropout"] > 0 else nn.Identity()

    def forward(self, hidden, global_mask, sliding_mask):
        B, L, D = hidden.shape
        qkv = self.Wqkv(hidden).view(B, L, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.transpose(3, 1).unbind(dim=2)  # [B, H, L, Dh]
        freqs = torch.arange(L, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        scores = scores + (global_mask if self.is_global else sliding_mask)
        probs = F.dropout(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), p=self.drop,
                          training=self.training)
        context = torch.matmul(probs, v).transpose(1, 2).contiguous().view(B, L, D)
        return self.out_drop(self.Wo(context))


class ModernMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, I = c["hidden_size"], c["intermediate_size"]
        self.Wi = nn.Linear(D, 2 * I, bias=c["mlp_bias"])
        self.act = ACTIVATIONS[c["hidden_activation"]]
        self.drop = nn.Dropout(c["mlp_dropout"])
        self.Wo = nn.Linear(I, D, bias=c["mlp_bias"])

    def forward(self, x):
        inp, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(inp) * gate))


class ModernLayer(nn.Module):
    def __init__(self, c, index):
        super().__init__()
        self.attn_norm = ModernNorm(c) if index > 0 else nn.Identity()
        self.attn = ModernAttention(c, index)
        self.mlp_norm = ModernNorm(c)
        self.mlp = ModernMLP(c)

    def forward(self, hidden, global_mask, sliding_mask):
        hidden = hidden + self.attn(self.attn_norm(hidden), global_mask, sliding_mask)
        return hidden + self.mlp(self.mlp_norm(hidden))


class ModernModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = ModernEmbeddings(c)
        self.layers = nn.ModuleList([ModernLayer(c, i) for i in range(c["num_hidden_layers"])])
        self.final_norm = ModernNorm(c)


class ModernHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"], bias=c["classifier_bias"])
        self.act = ACTIVATIONS[c["classifier_activation"]]
        self.norm = ModernNorm(c)

    def forward(self, x):
        return self.norm(self.act(self.dense(x)))


class ModernBertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = ModernModel(c)
        self.head = ModernHead(c)
        self.drop = nn.Dropout(c["classifier_dropout"])
        self.classifier = nn.Linear(c["hidden_size"], c.get("num_labels") or len(c["id2label"]))

    def forward(self, input_ids, token_type_ids, attention_mask):
        c = self.config
        hidden = self.model.embeddings(input_ids)
        dtype, L = hidden.dtype, input_ids.shape[1]
        global_mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        rows = torch.arange(L)
        window = (rows[None, :] - rows[:, None]).abs() <= c["local_attention"] // 2
        sliding_mask = global_mask.masked_fill(~window[None, None], torch.finfo(dtype).min)
        for layer in self.model.layers:
            hidden = layer(hidden, global_mask, sliding_mask)
        hidden = self.model.final_norm(hidden)
        if c["classifier_pooling"] == "cls":
            pooled = hidden[:, 0]
        else:
            m = attention_mask[..., None].to(dtype)
            pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
        return self.classifier(self.drop(self.head(pooled)))


def build_model(config, dropout):
    """The model config.json's model_type names; dropout (if not None) replaces every dropout probability."""
    if config.get("model_type") == "modernbert":
        if dropout is not None:
            for key in ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"):
                config[key] = dropout
        return ModernBertForSequenceClassification(config)
    if dropout is not None:
        config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = dropout
        config["classifier_dropout"] = None
    return BertForSequenceClassification(config)


def no_weight_decay(name):
    """HF Trainer's groups: no decay for biases and LayerNorm weights (ModernBERT's norms are LayerNorms)."""
    return name.endswith(".bias") or "LayerNorm.weight" in name or name.endswith("norm.weight")


# ---- weights, data -----------------------------------------------------------

def read_safetensors(path):
    """{name: tensor} from a .safetensors file: u64 header size, JSON header, raw little-endian data."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
    with open(path, "rb") as f:
        blob = f.read()
    (header_size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_size])
    base = 8 + header_size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = dtypes[info["dtype"]]
        count = (end - begin) // torch.tensor([], dtype=dtype).element_size()
        flat = torch.frombuffer(bytearray(blob[base + begin:base + end]), dtype=dtype, count=count)
        tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors


def collate(rows, labels, pad_id):
    """DataCollatorWithPadding: pad to the longest row with pad_id, attention mask 1 for real tokens."""
    L = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    types = torch.zeros(len(rows), L, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for b, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[b, :n] = torch.tensor(r["input_ids"])
        types[b, :n] = torch.tensor(r["token_type_ids"])
        mask[b, :n] = 1
    return ids, types, mask, torch.tensor(labels, dtype=torch.long)


def main():
    parser = argparse.ArgumentParser(description="PyTorch eager reference for benchmarks/side_by_side.sh")
    parser.add_argument("--model-dir", required=True, help="config.json + model.safetensors")
    parser.add_argument("--ids", required=True, help="`shardtrain tokenize` JSONL of the training file")
    parser.add_argument("--batches", required=True, help="bench_side_by_side batches JSON")
    parser.add_argument("--first-batch", type=int, default=0, help="start at this global batch")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--dropout", type=float, default=None, help="override both dropout probabilities")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--eval-ids", help="`shardtrain tokenize` JSONL of an eval file: time one eval pass")
    parser.add_argument("--eval-batch-size", type=int, default=32)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--profile", help="write the last step as a Chrome trace (rank 0; profile_summary.py reads it)")
    parser.add_argument("--turnstile", help="folder of go.<rank> / done.<rank> FIFOs: one step per turn (side_by_side.sh)")
    args = parser.parse_args()

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(args.threads)
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                                             world_size=world)

    config = json.load(open(os.path.join(args.model_dir, "config.json")))
    model = build_model(config, args.dropout)
    pad_id = config.get("pad_token_id", 0)
    weights = read_safetensors(os.path.join(args.model_dir, "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model.train()
    torch.manual_seed(1000 + rank)  # dropout masks
    decay = [p for n, p in model.named_parameters() if not no_weight_decay(n)]
    no_decay = [p for n, p in model.named_parameters() if no_weight_decay(n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    trained = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model

    rows = [json.loads(line) for line in open(args.ids)]
    plan = json.load(open(args.batches))
    assert plan["world_size"] == world, f"batches were printed for {plan['world_size']} ranks, running {world}"
    total_steps = args.warmup + args.steps
    assert len(plan["batches"]) >= args.first_batch + total_steps, "not enough batches printed"

    def wait_turn():
        if args.turnstile:
            with open(os.path.join(args.turnstile, f"go.{rank}")) as go:
                assert go.readline(), "turnstile closed"

    def end_turn():
        if args.turnstile:
            with open(os.path.join(args.turnstile, f"done.{rank}"), "w") as done:
                done.write("done\n")

    eval_rows = [json.loads(line) for line in open(args.eval_ids)] if args.eval_ids else None
    losses, step_s, real_tokens = [], [], []
    first_step_s = None
    for k in range(total_steps):
        global_batch = plan["batches"][args.first_batch + k]
        mine = global_batch[rank::world]
        ids, types, mask, labels = collate([rows[i] for i in mine], [plan["labels"][i] for i in mine], pad_id)
        wait_turn()
        profiling = args.profile and rank == 0 and k + 1 == total_steps
        if profiling:
            profiler = torch.autograd.profiler.profile()
            profiler.__enter__()
        start = time.perf_counter()
        loss = F.cross_entropy(trained(ids, types, mask), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        value = torch.tensor([loss.item()], dtype=torch.float64)
        if world > 1:
            torch.distributed.all_reduce(value)
        elapsed = time.perf_counter() - start
        if profiling:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(args.profile)
        end_turn()
        if first_step_s is None:
            first_step_s = time.perf_counter() - PROCESS_START
        losses.append(value.item() / world)
        step_s.append(elapsed)
        real_tokens.append(sum(len(rows[i]["input_ids"]) for i in global_batch))

    eval_s = None
    if eval_rows:
        # Accelerate's even batches: rank r takes a contiguous block of each global batch.
        model.eval()
        G = args.eval_batch_size * world
        wait_turn()
        if world > 1:
            torch.distributed.barrier()
        start = time.perf_counter()
        with torch.no_grad():
            for begin in range(0, len(eval_rows), G):
                block = list(range(begin, min(begin + G, len(eval_rows))))
                per = (len(block) + world - 1) // world
                mine = block[rank * per:(rank + 1) * per] or block[:1]
                ids, types, mask, _ = collate([eval_rows[i] for i in mine], [0] * len(mine), pad_id)
                model(ids, types, mask)
        if world > 1:
            torch.distributed.barrier()
        eval_s = time.perf_counter() - start
        end_turn()
        model.train()

    times = torch.tensor(step_s, dtype=torch.float64)
    if world > 1:
        torch.distributed.all_reduce(times, op=torch.distributed.ReduceOp.MAX)  # a step is as slow as its slowest rank

    if rank == 0:
        print(json.dumps({"side": "pytorch", "ranks": world, "threads": args.threads, "warmup": args.warmup,
                          "losses": losses, "step_s": times.tolist(), "real_tokens": real_tokens,
                          "global_batch": len(plan["batches"][0]), "time_to_first_step_s": first_step_s,
                          "eval_s": eval_s}))


if __name__ == "__main__":
    main()
    # Debian's torch 1.13 sometimes aborts in interpreter teardown ("terminate
    # called without an active exception", after the results are printed; 1 of
    # ~10 runs here): leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
