#!/usr/bin/env bash
# Trains this folder's sentencepiece.bpe.model: a SentencePiece Unigram model
# of 8,000 pieces (the xlm-roberta-base recipe at 1/31 the size: unigram,
# nmt_nfkc normalization, character coverage 0.9995) on the SIB-200 training
# text of the three languages shipped in data/sib200 (English, Chinese,
# Arabic: 2,103 sentences). Needs Debian's `sentencepiece` (spm_train);
# deterministic with one thread and a fixed seed. The model is committed: run
# this only to rebuild it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="$here/../../sib200"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for language in eng_Latn zho_Hans arb_Arab; do
  tail -n +2 "$data/$language/train.tsv" | cut -f3
done > "$work/sib200_train.txt"
(cd "$work" && spm_train --input=sib200_train.txt --model_prefix=sentencepiece.bpe --vocab_size=8000 \
  --model_type=unigram --character_coverage=0.9995 --num_threads=1 --random_seed=42 --minloglevel=1)
cp "$work/sentencepiece.bpe.model" "$here/sentencepiece.bpe.model"
echo "wrote $here/sentencepiece.bpe.model"
