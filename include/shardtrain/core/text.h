// Numbers as text for messages and logs.
//
//   shortest_text(2e-5) == "2e-05";  shortest_text(0.1) == "0.1";  shortest_text(345.0) == "345"
#pragma once

#include <string>

namespace shardtrain {

// The shortest %g text that reads back as the same double.
std::string shortest_text(double value);

}  // namespace shardtrain
