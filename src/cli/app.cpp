#include "shardtrain/cli/app.h"

#include <ATen/core/Tensor.h>
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <new>
#include <regex>
#include <thread>

#include "cli/commands.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/memory.h"
#include "shardtrain/core/signals.h"

namespace shardtrain {
namespace {

// After a rank fails before doing any work, find out whether every rank failed
// the same way (a config or flag error: all ranks parse the same input). Then
// rank 0 alone reports it and the job exits cleanly. If some rank does not join
// within a few seconds, it is elsewhere (maybe blocked in a collective), so
// this rank reports with its label and aborts the job rather than leave it hanging.
bool all_ranks_failed(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &request) != MPI_SUCCESS) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done != 0;
}

// An allocation that failed, told as what ran out: never std::bad_alloc or
// LibTorch's allocator text. `library_text` may hold "you tried to allocate N bytes".
std::string out_of_memory_message(const std::string& library_text) {
  std::string what = "an allocation failed";
  std::smatch match;
  static const std::regex bytes(R"(tried to allocate ([0-9]+) bytes)");
  if (std::regex_search(library_text, match, bytes))
    what = "an allocation of " + format_bytes(std::stod(match[1].str())) + " failed";
  else if (library_text.find("CUDA out of memory") != std::string::npos)
    what = "the GPU's memory is full (CUDA out of memory)";
  const std::optional<AvailableMemory> available = available_memory();
  return "out of memory: " + what +
         (available ? " (" + format_bytes(static_cast<double>(available->bytes)) + " of host memory available now: " +
                          available->source + ")"
                    : std::string()) +
         ". Lower train.batch_size, train.eval_batch_size or data.max_length, use a sharded parallel.strategy "
         "(zero2, zero3) or fewer ranks per node";
}

bool is_allocator_failure(const std::string& text) {
  return text.find("can't allocate memory") != std::string::npos ||
         text.find("CUDA out of memory") != std::string::npos ||
         text.find("Cannot allocate memory") != std::string::npos;
}

int report_failure(const World& world, MPI_Comm failure_comm, std::string message, int status) {
  // A value quoted whole (a 1 MB line) must not flood the terminal.
  message = shorten(message, 4000);
  if (world.size() == 1 || all_ranks_failed(failure_comm)) {
    if (world.rank() == 0) std::fprintf(stderr, "shardtrain: error: %s\n", message.c_str());
    return status;
  }
  std::fprintf(stderr, "shardtrain: error [%s]: %s\n", process_label().c_str(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
  return status;
}

}  // namespace

int run_cli(int argc, char** argv) {
  World world(&argc, &argv);
  MPI_Comm failure_comm = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_dup(world.comm(), &failure_comm));

  CLI::App app{"shardtrain: fine-tune BERT sequence classifiers with MPI (+ NCCL), sharded or not"};
  app.set_version_flag("--version", "shardtrain 0.1.0");
  app.require_subcommand(1);
  app.fallthrough(false);
  add_train_command(app, world);
  add_sweep_command(app, world);
  add_config_command(app, world);
  add_tokenize_command(app, world);
  add_predict_command(app, world);
  add_inspect_command(app, world);
  add_export_command(app, world);
  add_plot_command(app, world);
  add_estimate_memory_command(app, world);

  int status = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0.
    if (e.get_exit_code() == 0) {
      if (world.rank() == 0) app.exit(e);
      status = 0;
    } else {
      std::string message = e.what();
      if (e.get_name() == "RequiredError" || e.get_name() == "ArgumentMismatch" ||
          e.get_name() == "ExtrasError" || e.get_name() == "CallForHelp")
        message += " (run with --help for usage)";
      status = report_failure(world, failure_comm, message, 2);
    }
  } catch (const Preempted&) {
    status = kPreemptedExitStatus;  // every rank agreed to stop (train/preemption.h): a clean exit
  } catch (const Error& e) {
    status = report_failure(world, failure_comm, e.what(), 2);
  } catch (const std::bad_alloc&) {
    status = report_failure(world, failure_comm, out_of_memory_message(""), 1);
  } catch (const c10::Error& e) {
    const std::string text = e.what_without_backtrace();
    status = report_failure(world, failure_comm, is_allocator_failure(text) ? out_of_memory_message(text) : text, 1);
  } catch (const std::exception& e) {
    status = report_failure(world, failure_comm, e.what(), 1);
  }
  ST_CHECK_MPI(MPI_Comm_free(&failure_comm));
  return status;
}

}  // namespace shardtrain
