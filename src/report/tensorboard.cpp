#include "shardtrain/report/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "tensorboard_event.pb.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
namespace tb = shardtrain::tensorboard;

constexpr const char* kFilePrefix = "events.out.tfevents.";
constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return value;
}

std::string frame(const std::string& data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out += data;
  put_le(out, masked_crc32c(data), 4);
  return out;
}

// The intact records of an event file, in order, up to the first damaged one.
struct Record {
  size_t offset;  // of its header in the file
  size_t size;    // header + data + footer
  tb::Event event;
};
struct ParsedFile {
  std::vector<Record> records;
  size_t intact_bytes = 0;
  std::string damage;  // why parsing stopped before the end; empty if it did not
};

ParsedFile parse_event_file(const std::string& bytes) {
  ParsedFile out;
  size_t at = 0;
  while (at < bytes.size()) {
    const char* p = bytes.data() + at;
    const size_t left = bytes.size() - at;
    if (left < kHeaderBytes) {
      out.damage = "a record header cut short";
      break;
    }
    const uint64_t length = get_le(p, 8);
    if (get_le(p + 8, 4) != masked_crc32c(std::string_view(p, 8))) {
      out.damage = "the length's CRC does not match";
      break;
    }
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      out.damage = "a record cut short";
      break;
    }
    const std::string_view data(p + kHeaderBytes, length);
    if (get_le(p + kHeaderBytes + length, 4) != masked_crc32c(data)) {
      out.damage = "the data's CRC does not match";
      break;
    }
    Record record{at, kHeaderBytes + length + kFooterBytes, {}};
    if (!record.event.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
      out.damage = "a record that is not an Event";
      break;
    }
    at += record.size;
    out.records.push_back(std::move(record));
  }
  out.intact_bytes = at;
  return out;
}

// write_file_atomic's temporary file ("<name>.tmp-XXXXXX", or "<name>.tmp" of
// earlier versions): left behind only when a rewrite was cut short, and then
// the original is still whole.
bool is_leftover(const std::string& name) { return is_temp_file_name(name); }

// The event files of `dir` in name order (TensorBoard's), or the leftovers of
// cut-short rewrites; none if `dir` does not exist.
std::vector<std::string> event_files(const std::string& dir, bool leftovers = false) {
  std::vector<std::string> files;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return files;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind(kFilePrefix, 0) == 0 && is_leftover(name) == leftovers)
      files.push_back(entry.path().string());
  }
  if (error) throw Error("cannot list the TensorBoard folder '" + dir + "': " + error.message());
  std::sort(files.begin(), files.end());
  return files;
}

void remove_file(const std::string& file) {
  std::error_code error;
  if (!fs::remove(file, error) || error)
    throw Error("cannot delete the TensorBoard file '" + file + "': " + error.message());
}

std::string host_name() {
  char buffer[256] = {0};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') return "localhost";
  return buffer;
}

}  // namespace

double unix_time_now() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tensorboard_tag(const std::string& metric) {
  for (const char* split : {"eval_", "test_"})
    if (metric.rfind(split, 0) == 0) {
      const size_t n = std::strlen(split);
      return metric.substr(0, n - 1) + "/" + metric.substr(n);
    }
  return "train/" + metric;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, double file_time) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir))
    throw Error("cannot create the TensorBoard folder '" + dir + "': " + (error ? error.message() : "not a folder"));
  const std::string stem = (fs::path(dir) / str_format("%s%010lld.%s", kFilePrefix,
                                                       static_cast<long long>(file_time), host_name().c_str()))
                               .string();
  // A new file, never one that exists (O_EXCL: not even through a link).
  path_ = stem;
  int fd = -1;
  for (int n = 1;; ++n) {
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) break;
    path_ = stem + "." + std::to_string(n);
  }
  if (fd < 0) throw Error("cannot create '" + path_ + "': " + os_error_text(errno));
  file_.reset(::fdopen(fd, "wb"));
  if (!file_) {
    const int error = errno;
    ::close(fd);
    throw Error("cannot create '" + path_ + "': " + os_error_text(error));
  }
  tb::Event event;
  event.set_wall_time(file_time);
  event.set_file_version("brain.Event:2");
  write_event(event.SerializeAsString());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fflush(file_.get());
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tb::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  // Converting a double that float cannot hold is undefined behaviour: from
  // (2 - 2^-24) 2^127 up, round-to-nearest gives +-inf, so say so explicitly.
  constexpr double kFloatOverflow = 0x1.ffffffp127;
  const float infinity = std::numeric_limits<float>::infinity();
  const float stored = std::fabs(value) >= kFloatOverflow && std::isfinite(value) ? (value > 0 ? infinity : -infinity)
                                                                                  : static_cast<float>(value);
  v->set_simple_value(stored);
  write_event(event.SerializeAsString());
}

void TensorBoardWriter::write_event(const std::string& data) {
  const std::string record = frame(data);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) throw write_error(errno);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_.get()) != 0) throw write_error(errno);
}

// The OS's reason with its symbolic name, as every run-folder write says it
// (core/fs_util.h): "No space left on device (ENOSPC)".
Error TensorBoardWriter::write_error(int errno_value) const {
  return Error("cannot write '" + path_ + "': " + os_error_text(errno_value) +
               (errno_value == ENOSPC ? "; free some space (or move run.storage_path) and run again" : ""));
}

TensorBoardTrim trim_tensorboard_events(const std::string& dir, int64_t max_step) {
  TensorBoardTrim out;
  // TensorBoard reads any name with "tfevents" in it: a leftover would repeat its original.
  for (const std::string& leftover : event_files(dir, /*leftovers=*/true)) remove_file(leftover);
  for (const std::string& file : event_files(dir)) {
    ++out.num_files;
    const std::string bytes = read_file(file, "TensorBoard event file");
    const ParsedFile parsed = parse_event_file(bytes);
    std::string kept;
    int64_t dropped = 0;
    for (const Record& record : parsed.records) {
      if (record.event.step() > max_step) {
        ++dropped;
        continue;
      }
      kept.append(bytes, record.offset, record.size);
      ++out.num_events_kept;
    }
    out.num_events_dropped += dropped;
    const size_t damaged = bytes.size() - parsed.intact_bytes;
    out.num_damaged_bytes += static_cast<int64_t>(damaged);
    if (dropped == 0 && damaged == 0) continue;
    write_file_atomic(file, kept);
    ++out.num_files_rewritten;
  }
  return out;
}

int64_t remove_tensorboard_events(const std::string& dir) {
  int64_t removed = 0;
  for (const std::string& leftover : event_files(dir, /*leftovers=*/true)) remove_file(leftover);
  for (const std::string& file : event_files(dir)) {
    remove_file(file);
    ++removed;
  }
  return removed;
}

std::vector<TensorBoardScalar> read_tensorboard_scalars(const std::string& file) {
  const std::string bytes = read_file(file, "TensorBoard event file");
  const ParsedFile parsed = parse_event_file(bytes);
  if (!parsed.damage.empty())
    throw Error(str_format("%s: damaged at byte %zu: %s", file.c_str(), parsed.intact_bytes, parsed.damage.c_str()));
  std::vector<TensorBoardScalar> out;
  for (const Record& record : parsed.records) {
    if (!record.event.has_summary()) continue;
    for (const auto& value : record.event.summary().value()) {
      if (!value.has_simple_value()) continue;
      out.push_back({value.tag(), value.simple_value(), record.event.step(), record.event.wall_time()});
    }
  }
  return out;
}

}  // namespace shardtrain
