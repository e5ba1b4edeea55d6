// main() of a GoogleTest binary that mpirun starts on every rank: rank 0 prints the usual report, the
// other ranks only their failed assertions prefixed by the rank, and every rank exits with the verdict
// of all ranks (a failure seen on one rank fails the run).
#pragma once

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <exception>
#include <memory>

#include "parallel/mpi_communicator.h"

namespace sy::test {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      fmt::print(stderr, "[rank {}] {}:{}: {}\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

// Runs every test with `world` set through `set_world` (and cleared after). Returns the exit code.
template <typename SetWorld>
int run_mpi_tests(int argc, char** argv, const char* name, SetWorld set_world) {
  ::testing::InitGoogleTest(&argc, argv);
  int failed = 1;
  try {
    MpiSession mpi(&argc, &argv);
    {
      std::unique_ptr<Communicator> world = mpi.world();
      set_world(world.get());
      if (world->rank() != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new RankFailurePrinter(world->rank()));
      }
      failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
      float failures = static_cast<float>(failed);
      world->all_reduce_sum(&failures, 1);
      if (world->rank() == 0 && !failed && failures > 0.f) {
        fmt::print(stderr, "{}: {} other rank(s) failed; see their [rank N] lines\n", name, failures);
      }
      failed = failures > 0.f ? 1 : 0;
      set_world(nullptr);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", name, e.what());
    return 1;
  }
  return failed;
}

}  // namespace sy::test
