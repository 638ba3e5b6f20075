// SHA-256 (FIPS 180-4), for identities that a user may check with sha256sum:
// the frozen base of a LoRA run (model/lora.h).
//
//   Sha256 h;
//   h.update(data, size);
//   std::string hex = h.hex_digest();  // 64 lowercase hex digits
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shardtrain {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& text) { update(text.data(), text.size()); }
  // Ends the hash; no update() may follow.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

}  // namespace shardtrain
