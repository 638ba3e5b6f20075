#!/usr/bin/python3
"""The text seeds of the fuzz targets other than safetensors (make_corpus.py
writes them): real files from the repository and broken variants of them."""
import glob
import json
import os
import struct

SEP = "\n=====\n"  # fuzz_support.h's section separator


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- safetensors index -------------------------------------------------------
def index_corpus():
    good = {"metadata": {"total_size": 1024},
            "weight_map": {"bert.embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors",
                           "classifier.weight": "model-00002-of-00002.safetensors"}}
    return {
        "good_two_shards.json": json.dumps(good, indent=2),
        "good_empty_map.json": '{"weight_map": {}}',
        "bad_parent.json": '{"weight_map": {"a": "../../secret.safetensors"}}',
        "bad_dot.json": '{"weight_map": {"a": ".."}}',
        "bad_empty_name.json": '{"weight_map": {"a": ""}}',
        "bad_number.json": '{"weight_map": {"a": 3}}',
        "bad_no_map.json": '{"metadata": {}}',
        "bad_map_list.json": '{"weight_map": ["a"]}',
        "bad_truncated.json": '{"weight_map": {"a": "x.safet',
        "bad_deep.json": '{"weight_map": ' + "[" * 600 + "]" * 600 + "}",
        "bad_duplicate.json": '{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}',
    }


# ---- config.json of every family ---------------------------------------------
def hf_config_corpus(root):
    files = {}
    for path in sorted(glob.glob(os.path.join(root, "tests/fixtures/*/*/config.json")) +
                       glob.glob(os.path.join(root, "configs/models/*.json")) +
                       glob.glob(os.path.join(root, "tests/data/*.json"))):
        files["good_" + os.path.basename(os.path.dirname(path)) + "_" + os.path.basename(path)] = read(path)
    bert = json.loads(read(os.path.join(root, "configs/models/bert_tiny.json")))
    def variant(**changes):
        c = dict(bert)
        c.update(changes)
        return json.dumps(c)
    files.update({
        "bad_heads.json": variant(num_attention_heads=7),
        "bad_negative_hidden.json": variant(hidden_size=-64),
        "bad_huge_vocab.json": variant(vocab_size=1 << 40),
        "bad_huge_layers.json": variant(num_hidden_layers=1 << 31, hidden_size=1 << 20),
        "bad_dropout.json": variant(hidden_dropout_prob=1.5),
        "bad_type.json": variant(hidden_size="64"),
        "bad_family.json": variant(model_type="gpt2"),
        "bad_labels.json": variant(num_labels=3, id2label={"0": "a", "7": "b"}),
        "bad_label_keys.json": variant(id2label={"x": "a"}),
        "bad_float_size.json": variant(hidden_size=64.5),
        "bad_activation.json": variant(hidden_act="swish9"),
        "modernbert_window.json": json.dumps({"model_type": "modernbert", "hidden_size": 64, "num_attention_heads": 4,
                                              "num_hidden_layers": 3, "intermediate_size": 96, "vocab_size": 100,
                                              "global_attn_every_n_layers": 0, "local_attention": 7}),
        "bad_not_object.json": "[1, 2]",
        "bad_truncated.json": '{"model_type": "bert", "hidden_size": 6',
    })
    return files


# ---- run config TOML + overrides ---------------------------------------------
def run_config_corpus(root):
    files = {}
    for path in sorted(glob.glob(os.path.join(root, "configs/*.toml")) +
                       glob.glob(os.path.join(root, "configs/strategies/*.toml"))):
        files["good_" + os.path.basename(path)] = read(path)
    quick = read(os.path.join(root, "configs/quickstart.toml")).decode()
    files.update({
        "overrides.toml": quick + SEP + "train.lr=3e-5\nparallel.strategy=zero3\ntrain.epochs=2\nrun.seed=7\n",
        "bad_override_key.toml": quick + SEP + "train.lrr=1\n",
        "bad_override_value.toml": quick + SEP + "train.lr=fast\ntrain.batch_size=-1\n",
        "bad_override_int.toml": SEP + "train.batch_size=99999999999999999999\n",
        "bad_unknown_key.toml": "[train]\nlrr = 1\n",
        "bad_type.toml": "[train]\nlr = \"fast\"\n",
        "bad_syntax.toml": "[train\nlr = 1\n",
        "bad_combo.toml": "[train]\nmixed_precision = \"fp16\"\n[run]\ndevice = \"cpu\"\n",
        "bad_deepspeed_missing.toml": "[parallel]\ndeepspeed_config = \"/nonexistent/ds.json\"\n",
        "bad_array.toml": "[train]\nlr = [1, 2]\n",
        "bad_nested.toml": "[train.x.y]\nz = 1\n",
        "empty.toml": "",
    })
    return files


# ---- DeepSpeed JSON (first byte: world size - 1, +8 for a CUDA build) --------
def deepspeed_corpus(root):
    files = {}
    for path in sorted(glob.glob(os.path.join(root, "configs/deepspeed/*.json"))):
        for knob in (0, 1, 3 + 8):
            files["good_%s_%d" % (os.path.basename(path), knob)] = bytes([knob]) + read(path)
    def ds(knob, obj):
        return bytes([knob]) + (obj if isinstance(obj, str) else json.dumps(obj)).encode()
    files.update({
        "auto_all": ds(1, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                           "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2,
                           "reduce_bucket_size": "auto", "allgather_bucket_size": "auto"},
                           "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto",
                                                                     "eps": "auto", "weight_decay": "auto"}},
                           "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto",
                                                                             "total_num_steps": "auto"}}}),
        "batch_mismatch": ds(3, {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                 "gradient_accumulation_steps": 2}),
        "batch_derived": ds(2, {"train_batch_size": 48, "train_micro_batch_size_per_gpu": 8}),
        "bad_stage": ds(0, {"zero_optimization": {"stage": 9}}),
        "bad_auto_string": ds(0, {"train_micro_batch_size_per_gpu": "automatic"}),
        "bad_negative": ds(0, {"gradient_accumulation_steps": -2}),
        "bad_huge": ds(7, {"train_micro_batch_size_per_gpu": 4611686018427387904, "gradient_accumulation_steps": 4}),
        "bad_float": ds(0, {"train_micro_batch_size_per_gpu": 2.5}),
        "fp16_cpu": ds(0, {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 200}}),
        "bf16_and_fp16": ds(8, {"fp16": {"enabled": True}, "bf16": {"enabled": True}}),
        "bad_offload": ds(0, {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}),
        "activation_checkpointing": ds(0, {"activation_checkpointing": {"partition_activations": True,
                                                                       "number_checkpoints": "auto"}}),
        "bad_not_object": ds(0, "[]"),
        "bad_truncated": ds(0, '{"zero_optimization": {"stage": '),
    })
    return files


# ---- tokenizer: vocab file(s), tokenizer_config.json, text a, text b ----------
SMALL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "man", "##s", "run", "##ning", "un",
               "##aff", "##able", "hello", ",", "!", ".", "'", "é", "e", "##é", "中", "国", "日", "x", "##x",
               "Hello", "World", "##ing", "café", "cafe", "\u0301"]


def tokenizer_corpus(root):
    vocab = "\n".join(SMALL_VOCAB) + "\n"
    texts = ["Hello, World! the man's running unaffable", "caf\u00e9 cafe\u0301 CAFÉ \u4e2d\u56fd\u65e5",
             "\x00\x01\x7f \ufeff zero\u200bwidth \U0001F600 emoji", "x" * 300 + " " + "xx" * 50,
             "\udcff\udcfe invalid utf-8?", "\t\r\n spaces   only  "]
    files = {}
    for i, text in enumerate(texts):
        files["vocab_text_%d" % i] = vocab + SEP + SEP + chr(5 + 3 * i) + text + SEP + ("the man" if i % 2 else "")
    files.update({
        "config_lower": vocab + SEP + '{"do_lower_case": true, "strip_accents": null}' + SEP + "\x20HELLO Café" + SEP,
        "config_keep_accents": vocab + SEP + '{"do_lower_case": true, "strip_accents": false}' + SEP + "\x08café",
        "config_renamed": vocab.replace("[UNK]", "<unk>") + SEP + '{"unk_token": {"content": "<unk>"}}' + SEP + "zzz",
        "config_bad_type": vocab + SEP + '{"do_lower_case": "yes"}' + SEP + "a",
        "config_bad_json": vocab + SEP + '{"do_lower_case": tr' + SEP + "a",
        "config_contradiction": vocab + SEP + '{"strip_accents": true, "do_lower_case": false}' + SEP + "\x10é",
        "config_chinese_off": vocab + SEP + '{"tokenize_chinese_chars": false}' + SEP + "\x10\u4e2d\u56fd",
        "vocab_missing_cls": "[PAD]\n[UNK]\n[SEP]\nhello\n" + SEP + SEP + "hello",
        "vocab_empty": SEP + SEP + "hello",
        "vocab_bom_crlf": "\ufeff" + vocab.replace("\n", "\r\n") + SEP + SEP + "\x06hello",
        "vocab_duplicates": vocab + "the\nthe\n" + SEP + SEP + "\x07the the",
        "vocab_blank_lines": "\n\n" + vocab + "\n\n \n" + SEP + SEP + "\x06a",
    })
    files.update(bpe_tokenizer_seeds(root))
    files.update(spm_tokenizer_seeds(root))
    return files


# ---- tokenizer, SentencePiece kinds: spm.model, tokenizer.json Unigram -------
def spm_tokenizer_seeds(root):
    # Bytes, not text: a ModelProto (the 13 KB BPE model of the SentencePiece
    # tests), whole, cut short, and with bytes changed.
    model = read(os.path.join(root, "tests/data/spm/bpe-1k/sentencepiece.bpe.model"))
    tail = (SEP + '{"tokenizer_class": "DebertaV2Tokenizer"}' + SEP + "\x08Hello world [MASK]").encode()
    files = {
        "spm_model": model + tail,
        "spm_model_truncated": model[:len(model) // 2] + tail,
        "spm_model_damaged": model[:40] + b"\xff\xff\xff\xff\x0f" + model[45:] + tail,
    }
    unigram = {"model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                         "vocab": [["<unk>", 0.0], ["<s>", 0.0], ["</s>", 0.0], ["\u2581", -2.0], ["\u2581the", -3.0],
                                   ["a", -4.0], ["b", -4.5], ["\u2581ab", -5.0]]},
               "added_tokens": [{"id": 1, "content": "<s>", "special": True}, {"id": 2, "content": "</s>", "special": True}],
               "normalizer": {"type": "Sequence", "normalizers": [
                   {"type": "Strip", "left": False, "right": True},
                   {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]},
               "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
               "post_processor": {"type": "TemplateProcessing",
                                  "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}},
                                             {"SpecialToken": {"id": "</s>"}}],
                                  "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                  "special_tokens": {"<s>": {"ids": [1]}, "</s>": {"ids": [2]}}}}
    files["json_unigram"] = json.dumps(unigram, ensure_ascii=False) + SEP + SEP + "\x09the ab ba  the " + SEP + "ab"
    files["json_unigram_old_schema"] = json.dumps(
        dict(unigram, pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}),
        ensure_ascii=False) + SEP + SEP + "\x07  the"
    return files


# ---- tokenizer, BPE kinds: tokenizer.json, vocab.json + merges.txt -----------
MERGES_SEP = "\n-----\n"  # fuzz_tokenizer.cpp's split of vocab.json and merges.txt


def small_bpe(path, specials, merge_count=300):
    """A released byte-level BPE tokenizer.json cut to its 256 byte symbols,
    its first merge_count usable merges and the given special tokens, renumbered
    from 0 in that order. Returns (tokenizer.json as a dict, old id -> new id)."""
    root = json.loads(read(path))
    model = root["model"]
    old_ids = dict(model["vocab"])
    for entry in root.get("added_tokens", []):
        old_ids.setdefault(entry["content"], entry["id"])
    alphabet = sorted(tok for tok in model["vocab"] if len(tok) == 1)
    kept, merges = list(alphabet), []
    have = set(alphabet)
    for merge in model["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        if a in have and b in have and a + b in model["vocab"] and a + b not in have:
            merges.append(merge)
            kept.append(a + b)
            have.add(a + b)
            if len(merges) == merge_count:
                break
    tokens = list(specials) + [t for t in kept if t not in specials]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    renumber = {old_ids[tok]: vocab[tok] for tok in tokens if tok in old_ids}
    model = dict(model, vocab=vocab, merges=merges)
    added = [dict(e, id=vocab[e["content"]]) for e in root.get("added_tokens", []) if e["content"] in vocab]
    return dict(root, model=model, added_tokens=added), renumber


def bpe_tokenizer_seeds(root):
    vocab_dir = os.path.join(root, "data/vocab")
    roberta, _ = small_bpe(os.path.join(vocab_dir, "roberta-base/tokenizer.json"),
                           ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    v = roberta["model"]["vocab"]
    roberta["post_processor"] = dict(roberta["post_processor"], sep=["</s>", v["</s>"]], cls=["<s>", v["<s>"]])
    modern, renumber = small_bpe(os.path.join(vocab_dir, "modernbert/tokenizer.json"),
                                 ["<|padding|>", "<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]",
                                  "|||IP_ADDRESS|||"])
    for special in modern["post_processor"]["special_tokens"].values():
        special["ids"] = [renumber[i] for i in special["ids"]]
    dump = lambda obj: json.dumps(obj, ensure_ascii=False)
    rob, mod = dump(roberta), dump(modern)
    texts = ["Hello, World! the man's running <mask> unaffable", " caf\u00e9 CAF\u00c9\u0301 \u4e2d\u56fd [MASK]x",
             "\x00\x01\x7f \ufeff zero\u200bwidth \U0001F600 <s></s>", "  x" * 120 + "\t\r\n",
             "\udcff\udcfe invalid utf-8? |||IP_ADDRESS||| [CLS][SEP]"]
    files = {}
    for i, text in enumerate(texts):
        pair = SEP + ("the man <mask>" if i % 2 else "")
        files["json_roberta_%d" % i] = rob + SEP + SEP + chr(4 + 5 * i) + text + pair
        files["json_modernbert_%d" % i] = mod + SEP + SEP + chr(3 + 7 * i) + text + pair
    merges_txt = "#version: 0.2\n" + "\n".join(
        m if isinstance(m, str) else " ".join(m) for m in roberta["model"]["merges"]) + "\n"
    vocab_json = dump(roberta["model"]["vocab"])
    files.update({
        "merges_roberta": vocab_json + MERGES_SEP + merges_txt + SEP + SEP + "\x09Hello <mask> world" + SEP + "b",
        "merges_prefix_space": vocab_json + MERGES_SEP + merges_txt + SEP + '{"add_prefix_space": true, '
                               '"mask_token": {"content": "<mask>", "lstrip": true}}' + SEP + "\x0chi <mask>",
        "merges_crlf": vocab_json + MERGES_SEP + merges_txt.replace("\n", "\r\n") + SEP + SEP + "\x06ab",
        "merges_three_tokens": vocab_json + MERGES_SEP + "a b c\n" + SEP + SEP + "\x06abc",
        "merges_missing": vocab_json + SEP + SEP + "\x06abc",
        "merges_unknown_token": vocab_json + MERGES_SEP + "zz qq\n" + SEP + SEP + "\x06zzqq",
        "json_modernbert_config": mod + SEP + '{"model_max_length": 8192, "do_lower_case": true}' + SEP + "\x20ABC",
        "json_roberta_prefix_space": rob + SEP + '{"add_prefix_space": true}' + SEP + "\x05hello",
        "json_wordpiece": dump({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                                          "max_input_chars_per_word": 100,
                                          "vocab": {t: i for i, t in enumerate(SMALL_VOCAB)}},
                                "normalizer": {"type": "BertNormalizer", "lowercase": False},
                                "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]}})
                          + SEP + SEP + "\x08Hello the man's running" + SEP + "caf\u00e9",
    })
    def broken(name, change, text="\x08hello <mask>"):
        obj = json.loads(rob)
        change(obj)
        files["json_bad_" + name] = dump(obj) + SEP + SEP + text
    broken("unigram", lambda o: o["model"].update(type="Unigram"))
    broken("no_type_no_merges", lambda o: (o["model"].pop("type", None), o["model"].pop("merges")))
    broken("dropout_text", lambda o: o["model"].update(dropout="0.1"))
    broken("dropout", lambda o: o["model"].update(dropout=0.1))
    broken("byte_fallback", lambda o: o["model"].update(byte_fallback=True))
    broken("merge_three", lambda o: o["model"]["merges"].insert(0, "a b c"))
    broken("merge_list", lambda o: o["model"]["merges"].insert(0, ["a", 3]))
    broken("merge_unknown", lambda o: o["model"]["merges"].insert(0, "zz qq"))
    broken("merges_object", lambda o: o["model"].update(merges={"a": "b"}))
    broken("vocab_list", lambda o: o["model"].update(vocab=["a", "b"]))
    broken("vocab_negative_id", lambda o: o["model"]["vocab"].update(a=-5))
    broken("vocab_huge_id", lambda o: o["model"]["vocab"].update(a=1 << 40))
    broken("vocab_duplicate_id", lambda o: o["model"]["vocab"].update(a=0))
    broken("vocab_float_id", lambda o: o["model"]["vocab"].update(a=1.5))
    broken("added_huge_id", lambda o: o["added_tokens"].append({"id": 1 << 33, "content": "<big>", "special": True}))
    broken("added_no_content", lambda o: o["added_tokens"].append({"id": 7}))
    broken("added_empty_content", lambda o: o["added_tokens"].append({"id": 7, "content": "", "special": True}))
    broken("added_flags", lambda o: o["added_tokens"].append({"id": 9, "content": "ab", "single_word": True,
                                                               "rstrip": "yes"}))
    broken("unk_missing", lambda o: o["model"].update(unk_token="<nothere>"))
    broken("post_unknown_type", lambda o: o.update(post_processor={"type": "Fancy"}))
    broken("post_cls_missing", lambda o: o["post_processor"].update(cls=["<nothere>", 99999]))
    broken("post_cls_wrong_id", lambda o: o["post_processor"].update(cls=["<s>", -1]))
    broken("template_unknown", lambda o: o.update(post_processor={
        "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X", "type_id": 0}}, {"Sequence": {"id": "A"}}],
        "pair": [{"Sequence": {"id": "C", "type_id": 1}}], "special_tokens": {}}))
    broken("template_none", lambda o: o.update(post_processor=None))
    broken("normalizer_unknown", lambda o: o.update(normalizer={"type": "Precompiled"}))
    broken("normalizer_sequence", lambda o: o.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "left": True}]}))
    broken("pre_split", lambda o: o.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\s+"}}))
    broken("pre_sequence", lambda o: o.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": True}, {"type": "Digits"}]}))
    broken("model_list", lambda o: o.update(model=[1, 2]))
    files.update(gemma_bpe_seeds(root, dump))
    files["json_bad_truncated"] = rob[:5000] + SEP + SEP + "\x08a"
    files["json_bad_deep"] = '{"model": ' + "[" * 600 + "]" * 600 + "}" + SEP + SEP + "\x08a"
    return files


def gemma_bpe_seeds(root, dump):
    """SentencePiece-style BPE (mmBERT's, Gemma's structure): the test file
    tests/data/gemma_bpe/tokenizer.json and variants of it."""
    gemma = json.loads(read(os.path.join(root, "tests/data/gemma_bpe/tokenizer.json")))
    meta = "\u2581"
    text = "\x08a  b\t\U0001F600\ua66e\u02ac <mask> caf\u00e9 \u4e2d\u56fd"
    variants = {
        "mmbert": lambda o: None,
        "prepend": lambda o: o.update(normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": meta}, o["normalizer"]]}),
        "metaspace_first": lambda o: o.update(normalizer=None, pre_tokenizer={
            "type": "Metaspace", "replacement": meta, "prepend_scheme": "first", "split": False}),
        "metaspace_split": lambda o: o.update(normalizer=None, pre_tokenizer={
            "type": "Metaspace", "replacement": meta, "add_prefix_space": True}),
        "unk_unfused": lambda o: o["model"].update(byte_fallback=False, fuse_unk=False, ignore_merges=True),
        "bytes_missing": lambda o: [o["model"]["vocab"].pop("<0x%02X>" % b) for b in range(0xF0, 0xF8)],
        "bad_replace_regex": lambda o: o["normalizer"].update(pattern={"Regex": " +"}),
        "bad_metaspace_replacement": lambda o: o.update(pre_tokenizer={"type": "Metaspace", "replacement": "__"}),
    }
    files = {}
    for name, change in variants.items():
        obj = json.loads(json.dumps(gemma))
        change(obj)
        files["json_gemma_" + name] = dump(obj) + SEP + SEP + text + SEP + "  b \U0001F600"
    return files


# ---- readers: first byte = knobs of fuzz_reader.cpp --------------------------
def reader_corpus(root):
    tsv = "sentence1\tsentence2\tlabel\nA man.\tA person.\t1\nRain.\tWet.\t0\n"
    csv = 'sentence1,sentence2,label\n"Hello, world","She said ""yes""",pos\nplain,text,neg\n'
    jsonl = ('{"sentence1": "A man.", "sentence2": "A person.", "label": 2}\n\n'
             '{"sentence1": "Sun.", "sentence2": "Dry.", "label": 1}\n{"sentence1": "x", "sentence2": "y", "label": 0}\n')
    TSV, CSV, JSONL = 0, 1, 2
    B, NAMED, REG, NONE, SKIP = 4, 8, 16, 24, 32
    INFER, TWO, THREE = 64, 128, 192
    files = {
        "tsv_pairs": bytes([TSV | B]) + tsv.encode(),
        "tsv_infer": bytes([TSV | B | INFER]) + tsv.encode(),
        "tsv_two_classes": bytes([TSV | TWO]) + tsv.encode(),
        "tsv_bom_crlf": bytes([TSV | B]) + ("\ufeff" + tsv.replace("\n", "\r\n")).encode(),
        "tsv_regression": bytes([TSV | REG]) + "sentence1\tlabel\nok\t3.8\nbad\t-1e309\nnan\tnan\n".encode(),
        "tsv_bad_columns": bytes([TSV | B | SKIP]) + b"sentence1\tsentence2\tlabel\nonly one\n\ttwo\t\t1\n",
        "tsv_stray_label": bytes([TSV | THREE]) + b"sentence1\tlabel\na\t0\nb\t1\nc\tyes\nd\t7\n",
        "tsv_no_labels": bytes([TSV | NONE]) + b"sentence1\nhello\nworld\n",
        "tsv_bad_utf8": bytes([TSV | SKIP]) + b"sentence1\tlabel\n\xff\xfe\t1\nok\t0\n",
        "csv_named": bytes([CSV | B | NAMED]) + csv.encode(),
        "csv_unclosed_quote": bytes([CSV | B]) + b'sentence1,sentence2,label\n"never closed,x,1\n',
        "csv_embedded_newline": bytes([CSV | B | SKIP]) + b'sentence1,sentence2,label\n"two\nlines",b,1\n',
        "jsonl_pairs": bytes([JSONL | B]) + jsonl.encode(),
        "jsonl_infer_gap": bytes([JSONL | B | INFER]) + jsonl.encode(),
        "jsonl_types": bytes([JSONL | SKIP]) + b'{"sentence1": 5, "label": 1}\n{"sentence1": "a", "label": [1]}\n'
                                               b'{"sentence1": "b", "label": 1.5}\n[1,2]\n{"sentence1": "c", "label": "1"}\n',
        "jsonl_deep": bytes([JSONL]) + ('{"sentence1": ' + "[" * 400 + "]" * 400 + "}\n").encode(),
        "jsonl_huge_label": bytes([JSONL | TWO]) + b'{"sentence1": "a", "label": 9223372036854775807}\n'
                                                   b'{"sentence1": "b", "label": -9223372036854775808}\n',
    }
    for path in sorted(glob.glob(os.path.join(root, "tests/data/readers/*"))):
        ext = os.path.splitext(path)[1]
        files["repo_" + os.path.basename(path)] = bytes([{".tsv": TSV, ".csv": CSV}.get(ext, JSONL) | B]) + read(path)
    return files


# ---- curves: progress.csv, result.jsonl --------------------------------------
def curves_corpus():
    progress = ("step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s\n" +
                "".join("%d,0,%.3f,%.2e,1.0,100,1000,%d\n" % (s, 1.0 / s, 2e-5 * s / 10, s) for s in range(1, 11)))
    result = "".join(json.dumps({"step": s, "epoch": 0, "eval_loss": 0.5 / s, "eval_accuracy": 0.6 + s / 100,
                                 "eval_f1": 0.7, "eval_seconds": 1.5}) + "\n" for s in (5, 10))
    return {
        "run": progress + SEP + result,
        "progress_only": progress + SEP,
        "result_only": SEP + result,
        "resumed_repeats": progress + progress.split("\n", 1)[1] + SEP + result + result,
        "bad_header_only": "step,loss\n" + SEP,
        "bad_columns": progress + "11,0,0.1\n" + SEP,
        "bad_number": progress.replace("0.500", "zero") + SEP,
        "bad_nan_inf": progress + "11,0,nan,inf,-inf,1,1,1\n12,0,1e400,1e-400,0,0,0,0\n" + SEP,
        "bad_result_step": SEP + '{"step": "5", "eval_loss": 1}\n{"step": 1e30}\n',
        "bad_result_not_object": SEP + "[1]\n",
        "bad_result_truncated": SEP + '{"step": 5, "eval_loss": ',
        "huge_steps": "step,loss,lr\n-9223372036854775808,1,1\n9223372036854775807,2,2\n" + SEP,
        "one_point": "step,loss,lr\n1,1,1\n" + SEP + '{"step": 1, "eval_loss": 0, "eval_x": -0.0}\n',
    }


# ---- TensorBoard event files (first byte: the step trimmed to) --------------
def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data):
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def _event(step, tag=None, value=0.0, version=None):
    body = b"\x09" + struct.pack("<d", 1.7e9 + step) + b"\x10" + _varint(step)
    if version is not None:
        body += b"\x1a" + _varint(len(version)) + version.encode()
    else:
        v = b"\x0a" + _varint(len(tag)) + tag.encode() + b"\x15" + struct.pack("<f", value)
        summary = b"\x0a" + _varint(len(v)) + v
        body += b"\x2a" + _varint(len(summary)) + summary
    return body


def _record(data, damage_crc=False):
    length = struct.pack("<Q", len(data))
    crc = _masked(data) ^ (1 if damage_crc else 0)
    return length + struct.pack("<I", _masked(length)) + data + struct.pack("<I", crc)


def tensorboard_corpus():
    events = [_event(0, version="brain.Event:2")] + [_event(s, "train/loss", 1.0 / s) for s in range(1, 9)]
    whole = b"".join(_record(e) for e in events)
    return {
        "intact_trim5": bytes([5]) + whole,
        "intact_keep_all": bytes([200]) + whole,
        "torn_tail": bytes([9]) + whole[:-7],
        "torn_header": bytes([9]) + whole + b"\x10\x00\x00",
        "bad_data_crc": bytes([9]) + b"".join(_record(e, damage_crc=(i == 4)) for i, e in enumerate(events)),
        "bad_huge_length": bytes([3]) + whole[:40] + struct.pack("<Q", 1 << 62) + b"\0" * 12,
        "bad_not_protobuf": bytes([3]) + _record(b"\xff" * 20) + whole,
        "negative_step": bytes([3]) + _record(_event(-5, "x", 1.0)) + whole,
        "empty": bytes([0]),
        "resumed_repeats": bytes([4]) + whole + whole,
    }


# ---- checkpoint metadata (first byte even: attributes; odd: slice records) --
def _attribute_lines(attrs):
    out = []
    for name, (kind, value) in attrs.items():
        text = str(value) if kind != "s" else value.replace("\\", "\\\\").replace("\n", "\\n")
        out.append("%s\t%s\t%s" % (name, kind, text))
    return "\n".join(out) + "\n"


def _slice_records(records):
    out = struct.pack("<q", len(records))
    for name, dtype, shape, begin, count in records:
        out += struct.pack("<q", len(name)) + name.encode() + struct.pack("<i", dtype)
        out += struct.pack("<q", len(shape)) + b"".join(struct.pack("<q", d) for d in shape)
        out += struct.pack("<qq", begin, count)
    return out


def checkpoint_corpus(root):
    config = read(os.path.join(root, "configs/models/bert_tiny.json")).decode()
    vocab = "\n".join(SMALL_VOCAB) + "\n"
    state = {"kind": ("s", "shardtrain-train-checkpoint"), "step": ("i", 100), "epoch": ("i", 1),
             "batches_consumed": ("i", 20), "seed": ("i", 42), "num_training_steps": ("i", 300),
             "warmup_steps": ("i", 30), "base_lr": ("d", 2e-5), "world_size": ("i", 2),
             "global_batch_size": ("i", 32), "strategy": ("s", "zero3"), "config_toml": ("s", "[train]\nlr = 2e-5\n"),
             "model_config_json": ("s", config), "vocab_text": ("s", vocab), "lowercase": ("i", 0),
             "metrics_json": ("s", '{"eval_f1": 0.8}'), "loss_sum": ("d", 12.5), "loss_count": ("i", 10),
             "train_seconds": ("d", 33.0)}
    fp16 = dict(state, skipped_steps=("i", 3), loss_scale=("d", 65536.0), loss_scale_good_steps=("i", 7),
                loss_scale_hysteresis_left=("i", 2))
    early = dict(fp16, early_stopping_best=("d", 0.8), early_stopping_best_step=("i", 50),
                 early_stopping_bad_evals=("i", 2), early_stopped=("i", 1), stop_reason=("s", "the man running"))
    def attrs(a):
        return b"\x00" + _attribute_lines(a).encode()
    def recs(knob, records):
        return bytes([knob]) + _slice_records(records)
    I64MAX = (1 << 63) - 1
    return {
        "attrs_state": attrs(state),
        "attrs_fp16": attrs(fp16),
        "attrs_early_stopped": attrs(early),
        "attrs_bad_kind": attrs(dict(state, kind=("s", "something-else"))),
        "attrs_no_kind": attrs({k: v for k, v in state.items() if k != "kind"}),
        "attrs_missing_step": attrs({k: v for k, v in state.items() if k != "step"}),
        "attrs_wrong_type": attrs(dict(state, step=("d", 1.5), strategy=("i", 3))),
        "attrs_negative": attrs(dict(state, step=("i", -1), world_size=("i", 0))),
        "attrs_skipped_above_step": attrs(dict(fp16, skipped_steps=("i", 101))),
        "attrs_hostile_config": attrs(dict(state, model_config_json=("s", '{"hidden_size": 4611686018427387904, '
                                                                     '"num_attention_heads": 1, "vocab_size": 3}'))),
        "attrs_bad_vocab": attrs(dict(state, vocab_text=("s", "hello\nworld\n"))),
        "records_write_two_ranks": recs(1 | 8, [("w", 0, [4, 4], 0, 8), ("w", 0, [4, 4], 8, 8), ("b", 3, [4], 0, 4)]),
        "records_read": recs(3, [("w", 1, [10], 2, 5), ("s", 2, [], 0, 1), ("e", 0, [0, 7], 0, 0)]),
        "records_bad_dtype": recs(1, [("w", 7, [4], 0, 4)]),
        "records_negative_dtype": recs(1, [("w", -2147483648, [4], 0, 4)]),
        "records_shape_overflow": recs(1, [("w", 0, [1 << 40, 1 << 40], 0, 1)]),
        "records_negative_dim": recs(1, [("w", 0, [-4, -4], 0, 16)]),
        "records_range_overflow": recs(1, [("w", 0, [I64MAX], I64MAX, I64MAX)]),
        "records_overlap": recs(1 | 8, [("w", 0, [8], 0, 6), ("w", 0, [8], 4, 4)]),
        "records_truncated": recs(1, [("w", 0, [8], 0, 8)])[:-5],
        "records_huge_count": b"\x01" + struct.pack("<q", 1 << 60),
    }


def corpora(root):
    return {"safetensors_index": index_corpus(), "hf_config": hf_config_corpus(root),
            "run_config": run_config_corpus(root), "deepspeed": deepspeed_corpus(root),
            "tokenizer": tokenizer_corpus(root), "reader": reader_corpus(root), "curves": curves_corpus(),
            "tensorboard": tensorboard_corpus(), "checkpoint": checkpoint_corpus(root)}
