// The single-rank communicator.
#include "parallel/communicator.h"

namespace sy {

namespace {
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void barrier() override {}
};
}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRankCommunicator>(); }

}  // namespace sy
