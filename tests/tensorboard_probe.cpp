// Drives report/tensorboard.h from commands on stdin, one per line, so that
// tests/check_tensorboard_events.py can write event files and read them back
// with its own decoder:
//   open DIR FILE_TIME                  a new TensorBoardWriter; prints "file PATH"
//   scalar TAG STEP VALUE WALL_TIME     add_scalar (numbers as %.17g text); prints "ok"
//   flush | close                       flush() / destroy the writer; prints "ok"
//   trim DIR STEP                       trim_tensorboard_events; prints
//                                       "trim files F rewritten R kept K dropped D damaged B"
// A shardtrain::Error prints "error MESSAGE" and exits with status 2.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/report/tensorboard.h"

using namespace shardtrain;

int main() {
  std::unique_ptr<TensorBoardWriter> writer;
  std::string line;
  try {
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string command;
      in >> command;
      if (command == "open") {
        std::string dir, time;
        in >> dir >> time;
        writer = std::make_unique<TensorBoardWriter>(dir, std::strtod(time.c_str(), nullptr));
        std::printf("file %s\n", writer->path().c_str());
      } else if (command == "scalar") {
        std::string tag, step, value, wall_time;
        in >> tag >> step >> value >> wall_time;
        writer->add_scalar(tag, std::strtod(value.c_str(), nullptr), std::strtoll(step.c_str(), nullptr, 10),
                           std::strtod(wall_time.c_str(), nullptr));
        std::printf("ok\n");
      } else if (command == "flush") {
        writer->flush();
        std::printf("ok\n");
      } else if (command == "close") {
        writer.reset();
        std::printf("ok\n");
      } else if (command == "trim") {
        std::string dir, step;
        in >> dir >> step;
        const TensorBoardTrim t = trim_tensorboard_events(dir, std::strtoll(step.c_str(), nullptr, 10));
        std::printf("trim files %lld rewritten %lld kept %lld dropped %lld damaged %lld\n",
                    static_cast<long long>(t.num_files), static_cast<long long>(t.num_files_rewritten),
                    static_cast<long long>(t.num_events_kept), static_cast<long long>(t.num_events_dropped),
                    static_cast<long long>(t.num_damaged_bytes));
      } else if (!command.empty()) {
        std::fprintf(stderr, "tensorboard_probe: unknown command '%s'\n", command.c_str());
        return 1;
      }
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::printf("error %s\n", e.what());
    return 2;
  }
  return 0;
}
