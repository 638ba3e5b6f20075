#include "data/tokenizer/added_tokens.h"

#include <algorithm>

namespace shardtrain {

void AddedTokenSet::build(std::vector<AddedToken> list) {
  list.erase(std::remove_if(list.begin(), list.end(), [](const AddedToken& t) { return t.content.empty(); }),
             list.end());
  std::stable_sort(list.begin(), list.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
  tokens = std::move(list);
  first_two.assign(65536, false);
  std::fill(std::begin(first_one), std::end(first_one), false);
  for (const AddedToken& t : tokens) {
    const auto first = static_cast<unsigned char>(t.content[0]);
    if (t.content.size() == 1) {
      first_one[first] = true;
    } else {
      first_two[first * 256u + static_cast<unsigned char>(t.content[1])] = true;
    }
  }
}

}  // namespace shardtrain
