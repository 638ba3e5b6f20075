#include "shardtrain/cli/app.h"

#include <ATen/core/Tensor.h>
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"

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
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done != 0;
}

int report_failure(const World& world, MPI_Comm failure_comm, const std::string& message, int status) {
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
  MPI_Comm_dup(world.comm(), &failure_comm);

  CLI::App app{"shardtrain: fine-tune BERT sequence classifiers with MPI (+ NCCL), sharded or not"};
  app.set_version_flag("--version", "shardtrain 0.1.0");
  app.require_subcommand(1);
  app.fallthrough(false);
  add_train_command(app, world);
  add_config_command(app, world);
  add_tokenize_command(app, world);
  add_predict_command(app, world);
  add_inspect_command(app, world);
  add_export_command(app, world);
  add_plot_command(app, world);

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
  } catch (const Error& e) {
    status = report_failure(world, failure_comm, e.what(), 2);
  } catch (const c10::Error& e) {
    status = report_failure(world, failure_comm, e.what_without_backtrace(), 1);
  } catch (const std::exception& e) {
    status = report_failure(world, failure_comm, e.what(), 1);
  }
  MPI_Comm_free(&failure_comm);
  return status;
}

}  // namespace shardtrain
