// ShardPlan and the model's collectives.
#include "model/parallel.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace sy {

Share even_share(int64_t total, int rank, int size, const char* what) {
  SY_CHECK(size >= 1 && total % size == 0, "{} {} cannot be split evenly over {} ranks", what, total, size);
  const int64_t n = total / size;
  return {.start = n * rank, .count = n};
}

Share ceil_share(int64_t total, int rank, int size) {
  const int64_t n = (total + size - 1) / size;
  const int64_t start = std::min(total, n * rank);
  return {.start = start, .count = std::min(total, start + n) - start};
}

ShardPlan make_shard_plan(const ParallelGroups* groups, int64_t n_layers) {
  ShardPlan p;
  p.n_layers = n_layers;
  if (groups == nullptr) return p;
  p.groups = groups;
  const ParallelSizes& s = groups->mapping.sizes();
  const RankCoords& c = groups->coords;
  p.tp = s.tp, p.tp_rank = c.tp_rank;
  p.dp = s.dp, p.dp_rank = c.dp_rank;
  p.pp = s.pp, p.pp_rank = c.pp_rank;
  p.ep = s.ep, p.ep_rank = c.ep_rank;
  p.etp = s.etp, p.etp_rank = c.etp_rank;
  p.edp = s.edp, p.edp_rank = c.edp_rank;
  p.dense = s.dense_tp, p.dense_rank = c.dense_tp_rank;
  SY_CHECK(s.pp <= n_layers, "--pp {} exceeds the {} decoder layers built", s.pp, n_layers);
  const std::vector<int64_t> counts = stage_layer_counts(n_layers, s.pp, groups->pp_layers);
  p.first_layer = std::accumulate(counts.begin(), counts.begin() + c.pp_rank, int64_t{0});
  p.n_layers = counts[static_cast<size_t>(c.pp_rank)];
  return p;
}

bool ModelComm::direct(const Communicator& c) const { return c.device_memory() == (backend_.device() != Device::cpu); }

void* ModelComm::stage(size_t i, size_t bytes) {
  if (host_.size() <= i) host_.resize(i + 1);
  if (host_[i].size() < bytes) host_[i].resize(bytes);
  return host_[i].data();
}

void ModelComm::all_reduce(Communicator& c, float* x, int64_t n) {
  if (c.size() == 1 || n == 0) return;
  backend_.mark(Phase::communication);
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.all_reduce_sum(x, n);
    return c.wait();
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  auto* h = static_cast<float*>(stage(0, bytes));
  backend_.copy_to_host(h, x, bytes);
  c.all_reduce_sum(h, n);
  backend_.copy_to_device(x, h, bytes);
}

void ModelComm::reduce_scatter(Communicator& c, const float* send, float* recv, int64_t count) {
  backend_.mark(Phase::communication);
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.reduce_scatter_sum(send, recv, count);
    return c.wait();
  }
  auto* hs = static_cast<float*>(stage(0, bytes * static_cast<size_t>(c.size())));
  auto* hr = static_cast<float*>(stage(1, bytes));
  backend_.copy_to_host(hs, send, bytes * static_cast<size_t>(c.size()));
  c.reduce_scatter_sum(hs, hr, count);
  backend_.copy_to_device(recv, hr, bytes);
}

std::vector<int64_t> ModelComm::gather_counts(Communicator& c, int64_t mine) {
  const std::vector<int64_t> send(static_cast<size_t>(c.size()), mine);
  std::vector<int64_t> got = exchange_counts(c, send);  // got[r] = rank r's entry for me = its `mine`
  return got;
}

void ModelComm::all_gather(Communicator& c, const float* send, float* recv, int64_t count) {
  backend_.mark(Phase::communication);
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.all_gather(send, recv, count, DType::f32);
    return c.wait();
  }
  void* hs = stage(0, bytes);
  void* hr = stage(1, bytes * static_cast<size_t>(c.size()));
  backend_.copy_to_host(hs, send, bytes);
  c.all_gather(hs, hr, count, DType::f32);
  backend_.copy_to_device(recv, hr, bytes * static_cast<size_t>(c.size()));
}

void ModelComm::all_to_all_v(Communicator& c, const void* send, std::span<const int64_t> send_counts, void* recv,
                             std::span<const int64_t> recv_counts, DType dtype) {
  backend_.mark(Phase::communication);
  const auto n = static_cast<size_t>(c.size());
  std::vector<int64_t> sd(n), rd(n);
  for (size_t r = 1; r < n; ++r) {
    sd[r] = sd[r - 1] + send_counts[r - 1];
    rd[r] = rd[r - 1] + recv_counts[r - 1];
  }
  const size_t esize = dtype_size(dtype);
  const size_t sbytes = static_cast<size_t>(sd[n - 1] + send_counts[n - 1]) * esize;
  const size_t rbytes = static_cast<size_t>(rd[n - 1] + recv_counts[n - 1]) * esize;
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.all_to_all_v(send, send_counts, sd, recv, recv_counts, rd, dtype);
    return c.wait();
  }
  void* hs = stage(0, std::max<size_t>(sbytes, 1));
  void* hr = stage(1, std::max<size_t>(rbytes, 1));
  if (sbytes) backend_.copy_to_host(hs, send, sbytes);
  c.all_to_all_v(hs, send_counts, sd, hr, recv_counts, rd, dtype);
  if (rbytes) backend_.copy_to_device(recv, hr, rbytes);
}

std::vector<int64_t> ModelComm::exchange_counts(Communicator& c, const std::vector<int64_t>& send) {
  const auto n = static_cast<size_t>(c.size());
  SY_CHECK(send.size() == n, "exchange_counts: {} counts for {} ranks", send.size(), n);
  // The first exchange of an expert-parallel layer: where the ranks wait for the slowest of them.
  backend_.mark(Phase::communication);
  std::vector<int64_t> all(n * n);
  if (c.device_memory()) {  // through device memory for a device communicator
    const size_t bytes = (n + n * n) * sizeof(int64_t);
    if (!counts_ || counts_->size() < bytes) counts_ = backend_.alloc(bytes);
    auto* dev = counts_->as<int64_t>();
    backend_.copy_to_device(dev, send.data(), n * sizeof(int64_t));
    c.all_gather(dev, dev + n, static_cast<int64_t>(n), DType::i64);
    c.wait();
    backend_.copy_to_host(all.data(), dev + n, n * n * sizeof(int64_t));
  } else {
    c.all_gather(send.data(), all.data(), static_cast<int64_t>(n), DType::i64);
  }
  std::vector<int64_t> recv(n);
  for (size_t r = 0; r < n; ++r) recv[r] = all[r * n + static_cast<size_t>(c.rank())];
  return recv;
}

float* ModelComm::device_stage(size_t floats) {
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  if (!device_stage_ || device_stage_->size() < bytes) device_stage_ = backend_.alloc(bytes);
  return device_stage_->as<float>();
}

void ModelComm::all_gather_host(Communicator& c, const float* send, float* recv, int64_t count) {
  backend_.mark(Phase::communication);
  if (!c.device_memory()) return c.all_gather(send, recv, count, DType::f32);
  const auto n = static_cast<size_t>(count), all = n * static_cast<size_t>(c.size());
  float* dev = device_stage(n + all);
  backend_.copy_to_device(dev, send, n * sizeof(float));
  backend_.synchronize();
  c.all_gather(dev, dev + n, count, DType::f32);
  c.wait();
  backend_.copy_to_host(recv, dev + n, all * sizeof(float));
}

void ModelComm::broadcast_host(Communicator& c, float* data, int64_t count, int root) {
  backend_.mark(Phase::communication);
  if (!c.device_memory()) return c.broadcast(data, count, DType::f32, root);
  const auto n = static_cast<size_t>(count);
  float* dev = device_stage(n);
  if (c.rank() == root) backend_.copy_to_device(dev, data, n * sizeof(float));
  backend_.synchronize();
  c.broadcast(dev, count, DType::f32, root);
  c.wait();
  backend_.copy_to_host(data, dev, n * sizeof(float));
}

void ModelComm::send(Communicator& c, const void* x, int64_t n, DType dtype, int dest) {
  backend_.mark(Phase::communication);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.send(x, n, dtype, dest);
    return c.wait();
  }
  void* h = stage(0, bytes);
  backend_.copy_to_host(h, x, bytes);
  c.send(h, n, dtype, dest);
}

void ModelComm::recv(Communicator& c, void* x, int64_t n, DType dtype, int source) {
  backend_.mark(Phase::communication);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  if (direct(c)) {
    if (c.device_memory()) backend_.synchronize();
    c.recv(x, n, dtype, source);
    return c.wait();
  }
  void* h = stage(0, bytes);
  c.recv(h, n, dtype, source);
  backend_.copy_to_device(x, h, bytes);
}

}  // namespace sy
