// DeepSpeed's batch-size keys (train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps) -> train.batch_size and
// train.gradient_accumulation_steps: DeepSpeed's rule that the global batch is
// micro x accumulation x world size, with an absent one derived from the
// others as DeepSpeed derives it and "auto" filled as Accelerate fills it.
// docs/DESIGN.md, "One optimizer step".
#include <string>

#include "config/deepspeed_resolver.h"
#include "shardtrain/core/log.h"

namespace shardtrain::deepspeed {
namespace {

// Where a batch-size key's value came from; absent and "auto" differ
// (DeepSpeed derives an absent one from train_batch_size, Accelerate fills "auto").
enum class Source { kAbsent, kAuto, kNumber, kInvalid };

// a x b x c, or false where the product would not fit in int64 (a hostile
// JSON's sizes must be refused, not wrapped around).
bool batch_product(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t ab = 0;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

}  // namespace

void Resolver::resolve_batch(const json* micro_json, const json* accumulation_json, const json* total_json) {
  const int64_t world = context_.world_size;
  auto read = [&](const char* key, const json* v, int64_t& value) {
    if (!v) return Source::kAbsent;
    if (is_auto(*v)) return Source::kAuto;
    auto n = integer(key, *v, 1, true);
    if (!n) return Source::kInvalid;
    value = *n;
    return Source::kNumber;
  };
  int64_t micro = 0, accumulation = 0, total = 0;
  Source micro_source = read("train_micro_batch_size_per_gpu", micro_json, micro);
  Source accumulation_source = read("gradient_accumulation_steps", accumulation_json, accumulation);
  Source total_source = read("train_batch_size", total_json, total);
  if (micro_source == Source::kInvalid || accumulation_source == Source::kInvalid || total_source == Source::kInvalid)
    return;

  // "auto": Accelerate fills it from the run (dataloader batch size, accumulation steps).
  std::string micro_note, accumulation_note;
  auto too_large = [&](const char* key, const json* value) {
    problem(key, value,
            str_format("train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps (%lld) x world size "
                       "(%lld) is beyond 2^63 examples; use sizes that fit",
                       static_cast<long long>(micro), static_cast<long long>(accumulation),
                       static_cast<long long>(world)));
  };
  if (micro_source == Source::kAuto) {
    micro = c_.train.batch_size;
    micro_note = "(the run config's)";
  }
  if (accumulation_source == Source::kAuto) {
    accumulation = c_.train.gradient_accumulation_steps;
    accumulation_note = "(the run config's)";
  }
  if (total_source == Source::kNumber) {
    // DeepSpeed's _configure_train_batch_size: an absent value is derived from the others.
    auto derive = [&](int64_t divisor, int64_t& value, const char* what, std::string& note) {
      if (total % divisor != 0) {
        problem("train_batch_size", total_json,
                str_format("cannot derive %s: %lld is not divisible by %lld", what, static_cast<long long>(total),
                           static_cast<long long>(divisor)));
        return false;
      }
      value = total / divisor;
      note = "(train_batch_size / the others, as DeepSpeed derives it)";
      return true;
    };
    if (micro_source == Source::kAbsent && accumulation_source == Source::kAbsent) {
      accumulation = 1;
      accumulation_note = "(DeepSpeed's default)";
      if (!derive(world, micro, "train_micro_batch_size_per_gpu", micro_note)) return;
    } else if (micro_source == Source::kAbsent) {
      int64_t divisor = 0;
      if (!batch_product(accumulation, world, 1, &divisor)) return too_large("gradient_accumulation_steps", accumulation_json);
      if (!derive(divisor, micro, "train_micro_batch_size_per_gpu", micro_note)) return;
    } else if (accumulation_source == Source::kAbsent) {
      int64_t divisor = 0;
      if (!batch_product(micro, world, 1, &divisor)) return too_large("train_micro_batch_size_per_gpu", micro_json);
      if (!derive(divisor, accumulation, "gradient_accumulation_steps", accumulation_note)) return;
    }
    int64_t product = 0;
    if (!batch_product(micro, accumulation, world, &product)) return too_large("train_batch_size", total_json);
    if (product != total) {
      problem("train_batch_size", total_json,
              str_format("must equal train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps (%lld) x "
                         "world size (%lld) = %lld; fix one of them or write \"auto\" (the world size is the job's "
                         "number of ranks; `shardtrain config --world-size N` checks another)",
                         static_cast<long long>(micro), static_cast<long long>(accumulation),
                         static_cast<long long>(world), static_cast<long long>(product)));
      return;
    }
  } else {
    if (micro_source == Source::kAbsent) {
      micro = c_.train.batch_size;
      micro_note = "(the run config's; DeepSpeed would need it or train_batch_size)";
    }
    if (accumulation_source == Source::kAbsent) {
      accumulation = 1;
      accumulation_note = "(DeepSpeed's and Accelerate's default)";
    }
    if (!batch_product(micro, accumulation, world, &total))
      return too_large(micro_json ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps",
                       micro_json ? micro_json : accumulation_json);
  }
  auto noted = [](const std::string& note) { return note.empty() ? std::string() : " " + note; };
  if (assign("train.batch_size", c_.train.batch_size, micro, "train_micro_batch_size_per_gpu", micro_json))
    line("train_micro_batch_size_per_gpu", micro_json, "train.batch_size = " + text(micro) + noted(micro_note));
  if (assign("train.gradient_accumulation_steps", c_.train.gradient_accumulation_steps, accumulation,
             "gradient_accumulation_steps", accumulation_json))
    line("gradient_accumulation_steps", accumulation_json,
         "train.gradient_accumulation_steps = " + text(accumulation) + noted(accumulation_note));
  line("train_batch_size", total_json,
       str_format("%lld (%lld per rank x %lld accumulation steps x %lld ranks)", static_cast<long long>(total),
                  static_cast<long long>(micro), static_cast<long long>(accumulation), static_cast<long long>(world)));
}

}  // namespace shardtrain::deepspeed
