// Run-folder files (core/fs_util.h): atomic writes and appends whose failures
// name the path and the OS's reason, with no temporary file left behind; the
// free-space check; stale temporary files; message shortening (core/log.h).
// A full disk is /dev/full: every write to it fails with ENOSPC, so a symlink
// named like the temporary file turns any write into a full-disk write.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

#include "support/mpi_ranks.h"

using namespace shardtrain;

namespace {

namespace fs = std::filesystem;

std::string fs_util_temp_dir() {
  char buffer[] = "/tmp/shardtrain_fs_util_XXXXXX";
  REQUIRE(mkdtemp(buffer) != nullptr);
  return buffer;
}

std::string fs_util_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool fs_util_contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("write_file_atomic replaces the file and leaves no temporary") {
  const std::string dir = fs_util_temp_dir();
  const std::string path = dir + "/config.toml";
  write_file_atomic(path, "a = 1\n");
  CHECK(fs_util_read(path) == "a = 1\n");
  write_file_atomic(path, "a = 2\n");
  CHECK(fs_util_read(path) == "a = 2\n");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("a full disk names the path and ENOSPC, keeps the old file and removes the temporary") {
  const std::string dir = fs_util_temp_dir();
  const std::string path = dir + "/config.toml";
  write_file_atomic(path, "old\n");
  // The temporary file is a link to /dev/full: the write fails as on a full disk.
  REQUIRE(symlink("/dev/full", (path + ".tmp").c_str()) == 0);
  const std::string message = shardtrain_test::error_of([&] { write_file_atomic(path, std::string(1 << 16, 'x')); });
  CHECK(message == "cannot write " + path + ".tmp: No space left on device (ENOSPC)");
  CHECK(fs_util_read(path) == "old\n");
  CHECK_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));

  // append_line to a full disk: the same reason, the path named.
  const std::string log = dir + "/result.jsonl";
  REQUIRE(symlink("/dev/full", log.c_str()) == 0);
  CHECK(shardtrain_test::error_of([&] { append_line(log, "{\"step\":1}"); }) ==
        "cannot append to " + log + ": No space left on device (ENOSPC)");
  fs::remove_all(dir);
}

TEST_CASE("write_file_atomic into a missing folder names the path and ENOENT") {
  const std::string path = "/tmp/shardtrain_no_such_folder_for_fs_util/x/config.toml";
  CHECK(shardtrain_test::error_of([&] { write_file_atomic(path, "x"); }) ==
        "cannot create " + path + ".tmp: No such file or directory (ENOENT)");
}

TEST_CASE("append_line appends whole lines") {
  const std::string dir = fs_util_temp_dir();
  const std::string path = dir + "/progress.csv";
  append_line(path, "step,loss");
  append_line(path, "1,0.5");
  CHECK(fs_util_read(path) == "step,loss\n1,0.5\n");
  fs::remove_all(dir);
}

TEST_CASE("require_free_space refuses a write larger than the free space, naming both sizes") {
  const std::optional<uint64_t> free = free_bytes("/tmp");
  REQUIRE(free.has_value());
  CHECK(*free > 0);
  require_free_space("/tmp", 1, "a one-byte file");  // fits
  const std::string message =
      shardtrain_test::error_of([&] { require_free_space("/tmp", *free + (uint64_t{1} << 40), "checkpoint x.h5"); });
  CHECK(fs_util_contains(message, "No space left on device (ENOSPC): checkpoint x.h5 needs "));
  CHECK(fs_util_contains(message, " are free on the file system of /tmp"));
  // Unknown free space (no such folder): nothing to say before the write itself.
  require_free_space("/tmp/shardtrain_no_such_folder_for_fs_util", uint64_t{1} << 62, "x");
}

TEST_CASE("temporary file names and the removal of stale ones") {
  CHECK(is_temp_file_name("config.toml.tmp"));
  CHECK(is_temp_file_name("checkpoint_000003.h5.tmp-123456"));
  CHECK(is_temp_file_name("checkpoint_000003.h5.tmp-job.12_a-b"));
  CHECK_FALSE(is_temp_file_name("checkpoint_000003.h5"));
  CHECK_FALSE(is_temp_file_name("checkpoint_000003.h5.damaged"));
  CHECK_FALSE(is_temp_file_name(".tmp"));
  CHECK_FALSE(is_temp_file_name("notes.tmp-"));
  CHECK_FALSE(is_temp_file_name("x.tmp-a/b"));
  CHECK_FALSE(is_temp_file_name("x.tmpfile"));

  const std::string dir = fs_util_temp_dir();
  for (const char* name : {"config.toml.tmp", "checkpoint_000002.h5.tmp-111", "checkpoint_000003.h5.tmp-222",
                           "checkpoint_000001.h5", "result.jsonl", "checkpoint_000004.h5.damaged"})
    std::ofstream(dir + "/" + name) << "x";
  fs::create_directory(dir + "/folder.tmp");  // folders are never removed
  auto removed = remove_stale_temp_files(dir, /*keep_job_id=*/"222");
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{dir + "/checkpoint_000002.h5.tmp-111", dir + "/config.toml.tmp"});
  CHECK(fs::exists(dir + "/checkpoint_000003.h5.tmp-222"));
  CHECK(fs::exists(dir + "/checkpoint_000001.h5"));
  CHECK(fs::exists(dir + "/checkpoint_000004.h5.damaged"));
  CHECK(fs::exists(dir + "/folder.tmp"));
  CHECK(remove_stale_temp_files(dir) == std::vector<std::string>{dir + "/checkpoint_000003.h5.tmp-222"});
  CHECK(remove_stale_temp_files(dir + "/missing").empty());
  fs::remove_all(dir);
}

TEST_CASE("os_error_text names the errno") {
  CHECK(os_error_text(ENOSPC) == "No space left on device (ENOSPC)");
  CHECK(os_error_text(EACCES) == "Permission denied (EACCES)");
  CHECK(os_error_text(EROFS) == "Read-only file system (EROFS)");
}

TEST_CASE("shorten cuts long values for messages at a character boundary") {
  CHECK(shorten("short") == "short");
  const std::string long_line(1 << 20, 'a');
  const std::string cut = shorten(long_line);
  CHECK(cut == std::string(200, 'a') + "... (1048376 more bytes)");
  // "é" is two bytes: a cut through it backs up to the character's start.
  const std::string accents = std::string(199, 'a') + "\xC3\xA9" + "bbb";
  CHECK(shorten(accents) == std::string(199, 'a') + "... (5 more bytes)");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(3.0 * (1 << 30)) == "3.0 GiB");
}

// predict / tokenize / export (defect: `predict --model v.h5 --output v.h5`
// replaced the checkpoint with its predictions).
TEST_CASE("refuse_output_over_input: every spelling of an input file or of a path in an input folder") {
  const std::string dir = fs_util_temp_dir();
  const std::string model = dir + "/v.h5", folder = dir + "/hf";
  fs::create_directories(folder + "/sub");
  std::ofstream(model) << "weights";
  std::ofstream(folder + "/model.safetensors") << "weights";
  fs::create_symlink(model, dir + "/link.h5");
  fs::create_hard_link(folder + "/model.safetensors", dir + "/hard.safetensors");
  const auto refused = [&](const std::string& output, const std::string& input) {
    try {
      refuse_output_over_input("--output", output, "--model", input);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused(model, model) == "--output '" + model + "' is --model '" + model +
                                     "', which this command reads; writing it would destroy it; choose an --output "
                                     "outside it (nothing was written)");
  CHECK_FALSE(refused(dir + "/./sub/../v.h5", model).empty());
  CHECK_FALSE(refused(dir + "/link.h5", model).empty());  // a symlink to it
  CHECK_FALSE(refused(model, dir + "/link.h5").empty());
  CHECK(refused(dir + "/v.jsonl", model).empty());
  // A folder: any path inside it, existing or not, and hard links to its files.
  CHECK(refused(folder + "/model.safetensors", folder) ==
        "--output '" + folder + "/model.safetensors' is inside the folder of --model '" + folder +
            "', which this command reads; choose an --output outside it (nothing was written)");
  CHECK_FALSE(refused(folder + "/sub/new.jsonl", folder + "/").empty());
  CHECK_FALSE(refused(dir + "/hard.safetensors", folder).empty());
  CHECK(refused(dir + "/hf2/model.safetensors", folder).empty());  // a sibling whose name starts alike
  CHECK(refused(dir + "/preds.jsonl", folder).empty());
  // A file that does not exist yet, through a symlinked folder.
  fs::create_directory_symlink(folder, dir + "/hf_link");
  CHECK_FALSE(refused(dir + "/hf_link/new.jsonl", folder).empty());
  fs::remove_all(dir);
}
