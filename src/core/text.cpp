#include "shardtrain/core/text.h"

#include <cstdio>
#include <cstdlib>

namespace shardtrain {

std::string shortest_text(double value) {
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace shardtrain
