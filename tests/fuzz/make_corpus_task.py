#!/usr/bin/python3
"""The seeds of fuzz_task_data (make_corpus.py writes them to corpus/task_data/):
real files of the token-classification and multiple-choice readers (WNUT-17's
CoNLL, XCOPA's JSON Lines) and small good and broken ones in every format.

Each seed's first byte holds fuzz_task_data.cpp's knobs; the rest is the file."""
import json
import os

# Bit 0: the reader (0 words and tags, 1 multiple choice); bits 1-2: the format.
WORDS, CHOICES = 0, 1
CONLL, JSONL, CSV, TSV = 0, 2, 4, 6            # words: fuzz.conll / .jsonl / .csv / .tsv
C_JSONL, C_CSV, C_TSV = 0, 2, 4                # choices: fuzz.jsonl / .csv / .tsv
# Words: no tag column; fixed tag names O, B-PER, I-PER; integer tags named O, B-LOC; skip bad rows.
NO_TAGS, FIXED_TAGS, ID_NAMES, SKIP = 8, 16, 32, 64
# Choices: COPA's preset (premise, question, choice1, choice2) instead of SWAG's
# columns (sent1, sent2, ending0..3); the prefix column (sent2 / question); one
# list column "choices"; skip bad rows; no label column.
COPA, PREFIX, LIST, NO_LABEL = 8, 16, 32, 128


def seed(knobs, text):
    return bytes([knobs]) + (text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)


def jsonl(*rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def first_sentences(path, count):
    """The file up to its count-th blank line (CoNLL: count sentences)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blanks = [i for i, line in enumerate(lines) if not line.strip()]
    return "\n".join(lines[:blanks[count - 1] + 1]) + "\n"


def first_lines(path, count):
    with open(path, encoding="utf-8") as f:
        return "".join(f.readline() for _ in range(count))


def word_seeds(root):
    wnut = first_sentences(os.path.join(root, "data/ner/wnut17/dev.conll"), 3)
    per = jsonl({"tokens": ["Peter", "Pan", "smiles"], "ner_tags": ["B-PER", "I-PER", "O"]},
                {"tokens": ["Hi"], "ner_tags": ["O"]})
    return {
        "conll": seed(WORDS | CONLL, "EU\tB-ORG\nrejects\tO\n\nPeter\tB-PER\n"),
        "conll_wnut17_dev": seed(WORDS | CONLL, wnut),
        "conll_wnut17_predict": seed(WORDS | CONLL | NO_TAGS, "".join(
            line.split("\t")[0] + "\n" if line.strip() else "\n" for line in wnut.splitlines())),
        "conll_docstart_spaces": seed(WORDS | CONLL, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
                                                     "German JJ B-NP B-MISC\n\nPeter NNP B-NP B-PER\n"),
        "conll_bom_crlf": seed(WORDS | CONLL, "\ufeffPeter\tB-PER\r\nPan\tI-PER\r\n \t \r\nsmiles\tO\r\n"),
        "conll_fixed_tags": seed(WORDS | CONLL | FIXED_TAGS, "Peter\tB-PER\nPan\tI-PER\n\nhi\tO\n"),
        "conll_bad_tag_skip": seed(WORDS | CONLL | FIXED_TAGS | SKIP, "Paris\tB-LOC\n\nPeter\tB-PER\n"),
        "conll_bad_columns": seed(WORDS | CONLL, "a\tO\nb\tO\tX\nc\tO\n\nd\n"),
        "conll_bad_utf8_skip": seed(WORDS | CONLL | SKIP, "\udcff\udcfe\tO\n\nok\tO\n"),
        "jsonl_ids": seed(WORDS | JSONL, '{"tokens": ["EU", "rejects"], "ner_tags": [1, 0]}\n'),
        "jsonl_id_names": seed(WORDS | JSONL | ID_NAMES, jsonl({"tokens": ["Rome", "is"], "ner_tags": [1, 0]},
                                                              {"tokens": ["x"], "ner_tags": [0]})),
        "jsonl_fixed_ids": seed(WORDS | JSONL | FIXED_TAGS, jsonl({"tokens": ["Ann", "Lee", "ran"], "ner_tags": [1, 2, 0]})),
        "jsonl_names": seed(WORDS | JSONL, per),
        "jsonl_no_tags": seed(WORDS | JSONL | NO_TAGS, jsonl({"tokens": ["only", "words"]})),
        "jsonl_bad_rows_skip": seed(WORDS | JSONL | FIXED_TAGS | SKIP, jsonl(
            {"tokens": ["a", "b"], "ner_tags": ["O"]}, {"tokens": [], "ner_tags": []},
            {"tokens": "a b", "ner_tags": ["O", "O"]}, {"tokens": ["a"], "ner_tags": [7]},
            {"tokens": ["a"], "ner_tags": [-1]}, {"tokens": ["a"], "ner_tags": [[0]]}, {"tokens": ["a"]},
            {"tokens": ["ok"], "ner_tags": ["O"]}) + '{"tokens": ["a"\n[1, 2]\n'),
        "jsonl_deep": seed(WORDS | JSONL, '{"tokens": ' + "[" * 400 + "]" * 400 + "}\n"),
        "csv_lists": seed(WORDS | CSV, 'id,tokens,ner_tags\n0,"[""Peter"", ""Pan""]","[""B-PER"", ""I-PER""]"\n'
                                      '1,"[""a, b""]","[""O""]"\n'),
        "csv_bad_list_skip": seed(WORDS | CSV | SKIP, 'tokens,ner_tags\nPeter Pan,B-PER I-PER\n"[""a""]","[""O""]"\n'
                                                      '"[""a"", 3]","[""O"", ""O""]"\n'),
        "tsv_lists": seed(WORDS | TSV | FIXED_TAGS, 'tokens\tner_tags\n["Peter", "Pan"]\t["B-PER", "I-PER"]\n'
                                                    '["hi"]\t["O"]\n'),
        "tsv_missing_column": seed(WORDS | TSV, 'tokens\n["a"]\n'),
    }


def choice_seeds(root):
    xcopa = first_lines(os.path.join(root, "data/multiple_choice/xcopa/it/val.it.jsonl"), 5)
    swag = {"sent1": "She opens the door.", "sent2": "She", "ending0": "walks in.", "ending1": "flies.",
            "ending2": "sings.", "ending3": "sleeps.", "label": 0}
    return {
        "copa": seed(CHOICES | C_JSONL | COPA,
                     '{"premise": "p", "choice1": "a", "choice2": "b", "question": "cause", "label": 1}\n'),
        "copa_xcopa_val": seed(CHOICES | C_JSONL | COPA | PREFIX, xcopa),
        "copa_xcopa_predict": seed(CHOICES | C_JSONL | COPA | PREFIX | NO_LABEL, xcopa),
        "copa_bad_question_skip": seed(CHOICES | C_JSONL | COPA | PREFIX | SKIP, jsonl(
            {"premise": "p", "choice1": "a", "choice2": "b", "question": "why", "label": 0},
            {"premise": "p", "choice1": "a", "choice2": "b", "question": "effect", "label": 0})),
        "copa_csv": seed(CHOICES | C_CSV | COPA | PREFIX, 'premise,choice1,choice2,question,label\n'
                                                          '"It rained, hard.",The grass got wet.,"He said ""hi""",effect,0\n'),
        "copa_csv_bad_utf8_skip": seed(CHOICES | C_CSV | COPA | PREFIX | SKIP,
                                       "premise,choice1,choice2,question,label\n\udcff,a,b,cause,1\nok,a,b,cause,1\n"),
        "swag_list": seed(CHOICES | C_JSONL | LIST, '{"sent1": "s", "choices": ["a", "b", "c"], "label": 2}\n'),
        "swag_endings_prefix": seed(CHOICES | C_JSONL | PREFIX, jsonl(swag, dict(swag, label=3))),
        "swag_tsv_no_label": seed(CHOICES | C_TSV | PREFIX | NO_LABEL,
                                  "sent1\tsent2\tending0\tending1\tending2\tending3\nA man\tHe\truns\tsits\tjumps\tfalls\n"),
        "swag_bad_labels_skip": seed(CHOICES | C_JSONL | LIST | SKIP, jsonl(
            {"sent1": "s", "choices": ["a", "b"], "label": 5}, {"sent1": "s", "choices": ["a", "b"], "label": -1},
            {"sent1": "s", "choices": ["a", "b"], "label": "x"}, {"sent1": "s", "choices": ["a", "b"], "label": [0]},
            {"sent1": "s", "choices": ["a", "b", "c"], "label": 0}, {"sent1": ["s"], "choices": ["a", "b"], "label": 0},
            {"sent1": "s", "choices": "a", "label": 0}, {"sent1": "s", "choices": ["a", "b"], "label": 1})),
        "swag_bad_counts": seed(CHOICES | C_JSONL | LIST, jsonl(
            {"sent1": "s", "choices": ["a"], "label": 0}, {"sent1": "s", "choices": ["a", "b"], "label": 1},
            {"sent1": "s", "choices": ["a", "b"], "label": 0})),
        "swag_one_choice": seed(CHOICES | C_JSONL | LIST, jsonl({"sent1": "s", "choices": ["a"], "label": 0})),
        "swag_missing_columns": seed(CHOICES | C_CSV, "sent1,ending0,label\ns,a,0\n"),
    }


def task_data_corpus(root):
    return dict(word_seeds(root), **choice_seeds(root))
