// Collectives between the ranks of a group. Model code names collectives only through this interface;
// SingleRankCommunicator is the trivial group of one, where every collective is the identity.
#pragma once

#include <cstdint>
#include <memory>

namespace sy {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[i] = sum over ranks of data[i].
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  virtual void barrier() = 0;
};

std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace sy
