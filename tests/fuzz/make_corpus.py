#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets, corpus/<target>/ (README.md):
real files (shipped configs, fixtures, files shardtrain writes) and broken ones;
the text targets' seeds are make_corpus_text.py's, task_data's
make_corpus_task.py's. A corpus folder holds these seeds and the inputs that
once crashed a target, never libFuzzer's generated inputs (run_fuzz.sh fuzzes
a copy in its work folder).
For safetensors (also checked by tests/test_safetensors.cpp) good_* files are
valid and bad_* files must be refused. Run it again after changing a seed."""
import json
import os
import struct

FUZZ_DIR = os.path.dirname(os.path.abspath(__file__))
HERE = os.path.join(FUZZ_DIR, "corpus", "safetensors")
ROOT = os.path.dirname(os.path.dirname(FUZZ_DIR))


def raw(header_text, data=b"", length=None):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def good(header, data):
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return raw(text, data)


FILES = {
    "good_two_tensors": good({"__metadata__": {"format": "pt"}, "w": entry("F32", [2, 2], 0, 16),
                              "b": entry("I64", [1], 16, 24)}, bytes(range(24))),
    "good_scalar_and_empty": good({"s": entry("F64", [], 0, 8), "e": entry("BF16", [0, 4], 8, 8),
                                   "m": entry("BOOL", [3], 8, 11)}, b"\0" * 8 + b"\x01\x00\x01"),
    "good_empty_header": good({}, b""),
    "bad_short": b"\x03\x00\x00",
    "bad_huge_length": struct.pack("<Q", 1 << 62) + b"{}",
    "bad_length_past_end": raw("{}", length=4096),
    "bad_not_json": raw('{"a": {"dtype": "F32"'),
    "bad_not_object": raw("[1,2,3]"),
    "bad_overlap": good({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, b"\0" * 12),
    "bad_out_of_range": good({"a": entry("F32", [4], 0, 16)}, b"\0" * 8),
    "bad_gap": good({"a": entry("F32", [1], 4, 8)}, b"\0" * 8),
    "bad_dtype": good({"a": entry("F33", [1], 0, 4)}, b"\0" * 4),
    "bad_byte_count": good({"a": entry("F32", [3], 0, 8)}, b"\0" * 8),
    "bad_negative_shape": good({"a": entry("F32", [-2], 0, 8)}, b"\0" * 8),
    "bad_float_offsets": raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0.0,4.0]}}', b"\0" * 4),
    "bad_shape_overflow": good({"a": entry("U8", [1 << 40, 1 << 40], 0, 1)}, b"\0"),
    "bad_metadata": good({"__metadata__": {"format": ["pt"]}}, b""),
    "bad_nesting": raw('{"a":' + "[" * 300 + "]" * 300 + "}"),
    "bad_bool_bytes": good({"m": entry("BOOL", [2], 0, 2)}, b"\x01\x07"),
}

def write_corpus(target, files):
    folder = os.path.join(FUZZ_DIR, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            # surrogateescape: "\udcff" in a seed's text is the byte 0xff (invalid UTF-8).
            f.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)


if __name__ == "__main__":
    write_corpus("safetensors", FILES)
    import make_corpus_task
    import make_corpus_text
    for target, files in make_corpus_text.corpora(ROOT).items():
        write_corpus(target, files)
    write_corpus("task_data", make_corpus_task.task_data_corpus(ROOT))
