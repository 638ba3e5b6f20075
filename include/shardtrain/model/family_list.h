// The model families, one row each (docs/DESIGN.md, "Model families"). A row
// names the enumerator of ModelFamily (model/encoder_config.h) and the
// function that returns the family's FamilySpec (model/family_spec.h),
// defined in src/model/families/<family>.cpp. The enum and the table are
// built from this list: a new family is its file and one row here.
#pragma once

#define SHARDTRAIN_FAMILIES(ROW)       \
  ROW(kBert, bert_family)              \
  ROW(kRoberta, roberta_family)        \
  ROW(kDistilBert, distilbert_family)  \
  ROW(kElectra, electra_family)        \
  ROW(kModernBert, modernbert_family)  \
  ROW(kDebertaV2, deberta_v2_family)   \
  ROW(kEuroBert, eurobert_family)      \
  ROW(kGte, gte_family)
