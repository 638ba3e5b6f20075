// Run-folder files and outputs (core/fs_util.h): atomic writes that never
// replace what is at their path by something else (links, devices, FIFOs,
// "-"), appends whose failures name the path and the OS's reason, with no
// temporary file left behind; the free-space check; stale temporary files;
// message shortening (core/log.h). A full disk is /dev/full (every write to it
// fails with ENOSPC) or a file size limit (EFBIG).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// The files of `dir` other than `except`.
static std::vector<std::string> fs_util_other_files(const std::string& dir, const std::vector<std::string>& except) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::find(except.begin(), except.end(), name) == except.end()) out.push_back(name);
  }
  return out;
}

TEST_CASE("write_file_atomic replaces the file and leaves no temporary") {
  const std::string dir = fs_util_temp_dir();
  const std::string path = dir + "/config.toml";
  write_file_atomic(path, "a = 1\n");
  CHECK(fs_util_read(path) == "a = 1\n");
  chmod(path.c_str(), 0640);
  write_file_atomic(path, "a = 2\n");
  CHECK(fs_util_read(path) == "a = 2\n");
  struct stat info {};
  REQUIRE(stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0640);  // the replaced file's mode, not mkstemp's 0600
  CHECK(fs_util_other_files(dir, {"config.toml"}).empty());
  fs::remove_all(dir);
}

// The shared writer (OutputFile; write_file_atomic is OutputFile + commit) of
// every output: predict --output, tokenize --output, plot --output, export's
// config.json / tokenizer files / model.safetensors, and the run folder's
// config.toml, curves.svg, result.jsonl and progress.csv rewrites and the
// TensorBoard rewrites (issue 37, item 1).
TEST_CASE("an output never replaces what is at its path by something else") {
  const std::string dir = fs_util_temp_dir();
  // A file named like the old fixed temporary name is another file: kept.
  const std::string out = dir + "/out.jsonl";
  std::ofstream(out + ".tmp") << "the input\n";
  write_file_atomic(out, "new\n");
  CHECK(fs_util_read(out) == "new\n");
  CHECK(fs_util_read(out + ".tmp") == "the input\n");

  // A symbolic link is written through; the link stays a link.
  std::ofstream(dir + "/target.txt") << "old\n";
  REQUIRE(symlink("target.txt", (dir + "/link.jsonl").c_str()) == 0);
  write_file_atomic(dir + "/link.jsonl", "through\n");
  CHECK(fs::is_symlink(dir + "/link.jsonl"));
  CHECK(fs_util_read(dir + "/target.txt") == "through\n");
  // A chain of links, the last one dangling: the file it names is created.
  REQUIRE(symlink("dangling.txt", (dir + "/d1").c_str()) == 0);
  REQUIRE(symlink(("../" + fs::path(dir).filename().string() + "/d1").c_str(), (dir + "/d2").c_str()) == 0);
  write_file_atomic(dir + "/d2", "made\n");
  CHECK(fs::is_symlink(dir + "/d2"));
  CHECK(fs::is_symlink(dir + "/d1"));
  CHECK(fs_util_read(dir + "/dangling.txt") == "made\n");

  // A device is written in place, never renamed over: a link to /dev/null
  // still leads to the device afterwards.
  REQUIRE(symlink("/dev/null", (dir + "/null").c_str()) == 0);
  write_file_atomic(dir + "/null", "discarded\n");
  CHECK(fs::is_symlink(dir + "/null"));
  CHECK(fs::is_character_file("/dev/null"));
  // ... and a full device says so, naming the path.
  REQUIRE(symlink("/dev/full", (dir + "/full").c_str()) == 0);
  CHECK(shardtrain_test::error_of([&] { write_file_atomic(dir + "/full", "x"); }) ==
        "cannot write " + dir + "/full (-> /dev/full): No space left on device (ENOSPC)");

  // A FIFO is written in place: its reader gets the bytes, the FIFO stays.
  const std::string fifo = dir + "/pipe";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = fs_util_read(fifo); });
  write_file_atomic(fifo, "through the pipe\n");
  reader.join();
  CHECK(received == "through the pipe\n");
  struct stat info {};
  REQUIRE(lstat(fifo.c_str(), &info) == 0);
  CHECK(S_ISFIFO(info.st_mode));

  // Refused before anything is written: a folder, a loop of links, "".
  CHECK(shardtrain_test::error_of([&] { OutputFile("/tmp", "--output"); }) ==
        "--output '/tmp' is a folder; name a file in it");
  REQUIRE(symlink("loop", (dir + "/loop").c_str()) == 0);
  CHECK(fs_util_contains(shardtrain_test::error_of([&] { write_file_atomic(dir + "/loop", "x"); }),
                         "a loop of symbolic links"));
  CHECK(shardtrain_test::error_of([&] { OutputFile("", "--output"); }) ==
        "--output '': the path is empty; name a file (or - for standard output)");
  CHECK(fs_util_other_files(dir, {"out.jsonl", "out.jsonl.tmp", "target.txt", "link.jsonl", "d1", "d2",
                                  "dangling.txt", "null", "full", "pipe", "loop"})
            .empty());
  fs::remove_all(dir);
}

// An output path that is a loop of links, or passes through one, made
// std::filesystem throw a bare filesystem_error (exit 1) in export.
TEST_CASE("refuse_link_loop names the flag and the looping link, and lets every other path through") {
  const std::string dir = fs_util_temp_dir();
  REQUIRE(symlink("loop", (dir + "/loop").c_str()) == 0);
  const std::string eloop = os_error_text(ELOOP);
  CHECK(shardtrain_test::error_of([&] { refuse_link_loop(dir + "/loop", "--output"); }) ==
        "--output '" + dir + "/loop': a loop of symbolic links (" + eloop + "); point --output at a real path");
  CHECK(shardtrain_test::error_of([&] { refuse_link_loop(dir + "/loop/sub/model", "--output"); }) ==
        "--output '" + dir + "/loop/sub/model': '" + dir + "/loop' is a loop of symbolic links (" + eloop +
            "); point --output at a real path");
  // Two links that point at each other.
  REQUIRE(symlink("b", (dir + "/a").c_str()) == 0);
  REQUIRE(symlink("a", (dir + "/b").c_str()) == 0);
  CHECK(fs_util_contains(shardtrain_test::error_of([&] { refuse_link_loop(dir + "/a", "run.storage_path"); }),
                         "run.storage_path '" + dir + "/a': a loop of symbolic links"));
  // A new file, a dangling link, a folder, a file, "-" and "" are not loops.
  REQUIRE(symlink("nowhere", (dir + "/dangling").c_str()) == 0);
  for (const std::string& path : {dir + "/new.jsonl", dir + "/missing/new.jsonl", dir + "/dangling", dir,
                                  std::string("/dev/null"), std::string("-"), std::string()})
    CHECK_NOTHROW(refuse_link_loop(path, "--output"));
  fs::remove_all(dir);
}

TEST_CASE("\"-\" is standard output") {
  OutputFile out("-");
  CHECK(out.in_place());
  out.write("");  // nothing: the test's own output stays clean
  out.commit();
}

TEST_CASE("a failed write names the path and the reason, keeps the old file and removes the temporary") {
  const std::string dir = fs_util_temp_dir();
  const std::string path = dir + "/config.toml";
  write_file_atomic(path, "old\n");
  // A file size limit makes the write fail as a full disk would, in the temporary file.
  struct rlimit before {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &before) == 0);
  struct rlimit small = before;
  small.rlim_cur = 4096;
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string message = shardtrain_test::error_of([&] { write_file_atomic(path, std::string(1 << 16, 'x')); });
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  CHECK(message == "cannot write " + path + ": File too large (EFBIG)");
  CHECK(fs_util_read(path) == "old\n");
  CHECK(fs_util_other_files(dir, {"config.toml"}).empty());

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
        "cannot create a file in /tmp/shardtrain_no_such_folder_for_fs_util/x (writing " + path +
            "): No such file or directory (ENOENT)");
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
