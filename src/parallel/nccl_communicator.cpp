// The NCCL communicator: each collective is the matching NCCL call on device memory, enqueued on the
// communicator's stream, with every NCCL and CUDA status checked.
#include "parallel/nccl_communicator.h"

#include <nccl.h>

#include <array>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "base/check.h"

namespace sy {

void check_nccl_status(int status, std::string_view call, int rank, std::string_view detail) {
  if (status == ncclSuccess) [[likely]] {
    return;
  }
  SY_FAIL("{} failed on rank {}: {} (NCCL error {}){}{}", call, rank,
          ncclGetErrorString(static_cast<ncclResult_t>(status)), status, detail.empty() ? "" : "; ", detail);
}

namespace {

// How NCCL sees `count` elements of a dtype: its own type where it has one, bytes otherwise. Only
// all_reduce_sum and reduce_scatter_sum do arithmetic (on f32); every other call moves bytes exactly.
struct NcclElements {
  ncclDataType_t type;
  size_t per_element;  // NCCL elements per element of the dtype

  size_t count(int64_t n) const { return static_cast<size_t>(n) * per_element; }
};

NcclElements nccl_elements(DType t) {
  switch (t) {
    case DType::f32:
      return {ncclFloat32, 1};
    case DType::f16:
      return {ncclFloat16, 1};
    case DType::bf16:
      return {ncclBfloat16, 1};
    case DType::f8_e4m3:
      return {ncclFloat8e4m3, 1};
    case DType::f8_e5m2:
      return {ncclFloat8e5m2, 1};
    case DType::f64:
      return {ncclFloat64, 1};
    case DType::i64:
      return {ncclInt64, 1};
    case DType::i32:
      return {ncclInt32, 1};
    case DType::i16:  // NCCL has no 16-bit integer type
      return {ncclUint8, 2};
    case DType::i8:
      return {ncclInt8, 1};
    case DType::u8:
    case DType::boolean:
      return {ncclUint8, 1};
  }
  SY_FAIL("no NCCL type for dtype {}", static_cast<int>(t));
}

const char* memory_kind(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeUnregistered:
      return "pageable host memory";
    case cudaMemoryTypeHost:
      return "pinned host memory";
    case cudaMemoryTypeDevice:
      return "device memory";
    case cudaMemoryTypeManaged:
      return "managed memory";
  }
  return "memory of an unknown kind";
}

void destroy_stream(cudaStream_t stream) {
  // A destructor cannot report a failure; the stream is unusable either way.
  cudaStreamDestroy(stream);
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, std::unique_ptr<Communicator> owned_bootstrap,
                                   const NcclOptions& options, int origin_rank, StreamHandle own_stream,
                                   cudaStream_t stream)
    : owned_bootstrap_(std::move(owned_bootstrap)),
      bootstrap_(&bootstrap),
      rank_(bootstrap.rank()),
      size_(bootstrap.size()),
      device_(options.cuda_device),
      origin_rank_(origin_rank),
      wait_timeout_(options.wait_timeout),
      own_stream_(std::move(own_stream)),
      stream_(stream) {
  SY_CHECK(!bootstrap.device_memory(),
           "the NCCL communicator is bootstrapped over a host communicator (MPI or single rank), not over one that "
           "moves device memory");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (!own_stream_) {
    cudaStream_t created = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    own_stream_ = StreamHandle(created, destroy_stream);
    stream_ = created;
  }

  // Rank 0 makes the id and tells the others whether it could, so that its failure is not a hang.
  std::array<unsigned char, 1 + sizeof(ncclUniqueId)> message{};
  ncclResult_t made = ncclSuccess;
  if (rank_ == 0) {
    ncclUniqueId id{};
    made = ncclGetUniqueId(&id);
    message[0] = made == ncclSuccess ? 1 : 0;
    std::memcpy(message.data() + 1, &id, sizeof(id));
  }
  bootstrap.broadcast(message.data(), static_cast<int64_t>(message.size()), DType::u8, 0);
  // Some MPIs complete a broadcast only at a later MPI call; NCCL's initialisation makes none.
  bootstrap.barrier();
  if (rank_ == 0) check_nccl(made, "ncclGetUniqueId");
  SY_CHECK(message[0] == 1,
           "rank {}: rank 0 of this communicator could not create NCCL's unique id (its own error "
           "names the cause)",
           origin_rank_);
  ncclUniqueId id{};
  std::memcpy(&id, message.data() + 1, sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // calls return once enqueued; a nonblocking communicator would need polling after each
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRankConfig(&comm, size_, id, rank_, &config), "ncclCommInitRankConfig");
  comm_ = comm;
  try {
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&barrier_word_), sizeof(float), own_stream_.get()),
               "cudaMallocAsync");
    check_cuda(cudaMemsetAsync(barrier_word_, 0, sizeof(float), own_stream_.get()), "cudaMemsetAsync");
    // The word is used on whatever stream the communicator issues on later.
    check_cuda(cudaStreamSynchronize(own_stream_.get()), "cudaStreamSynchronize");
  } catch (...) {
    if (barrier_word_ != nullptr) cudaFreeAsync(barrier_word_, own_stream_.get());
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    // Destroying waits for the peers to destroy too; after an error, or while an exception unwinds (the
    // peers may be waiting in a collective for this rank), abort instead. Failures cannot be reported here.
    ncclResult_t async = ncclSuccess;
    const bool healthy = std::uncaught_exceptions() == 0 && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
                         (async == ncclSuccess || async == ncclInProgress);
    if (healthy) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  // Stream-ordered, so no device-wide synchronisation (cudaFree) that work stuck on a peer could block.
  if (barrier_word_ != nullptr) cudaFreeAsync(barrier_word_, own_stream_.get());
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options) {
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  SY_CHECK(counted == cudaSuccess, "cudaGetDeviceCount failed on rank {}: {} ({}); the NCCL communicator needs a GPU",
           bootstrap.rank(), cudaGetErrorString(counted), cudaGetErrorName(counted));
  SY_CHECK(options.cuda_device >= 0 && options.cuda_device < devices,
           "rank {} asks for GPU {} but sees {} GPU(s) (0..{}); run one rank per GPU and check CUDA_VISIBLE_DEVICES",
           bootstrap.rank(), options.cuda_device, devices, devices - 1);
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(bootstrap, nullptr, options, bootstrap.rank(), nullptr, nullptr));
}

void NcclCommunicator::check_usable(const char* call) const {
  SY_CHECK(comm_ != nullptr, "{} on rank {}: this NCCL communicator was aborted after an earlier failure: {}", call,
           origin_rank_, failure_);
}

void NcclCommunicator::check_nccl(int status, const char* call) const {
  if (status == ncclSuccess) [[likely]] {
    return;
  }
  const char* last = ncclGetLastError(comm_);
  const std::string detail =
      fmt::format("rank {} of {} in this communicator, GPU {}{}{}", rank_, size_, device_,
                  last != nullptr && *last != '\0' ? "; NCCL says: " : "", last != nullptr ? last : "");
  check_nccl_status(status, call, origin_rank_, detail);
}

void NcclCommunicator::check_cuda(cudaError_t status, const char* call) const {
  SY_CHECK(status == cudaSuccess, "{} failed on rank {} (rank {} of {} in this communicator, GPU {}): {} ({})", call,
           origin_rank_, rank_, size_, device_, cudaGetErrorString(status), cudaGetErrorName(status));
}

void NcclCommunicator::check_not_capturing(const char* call) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream_, &capture), "cudaStreamIsCapturing");
  SY_CHECK(capture == cudaStreamCaptureStatusNone,
           "{} on rank {}: the communicator's stream is being captured into a CUDA graph, and a host wait cannot be "
           "captured; call it before or after the capture",
           call, origin_rank_);
}

void NcclCommunicator::check_device_buffer(const void* data, const char* call, const char* what) const {
  SY_CHECK(data != nullptr, "{} on rank {}: the {} is null", call, origin_rank_, what);
  // Skipped during capture: the check is made when the same call runs uncaptured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream_, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) return;
  cudaPointerAttributes attributes{};
  check_cuda(cudaPointerGetAttributes(&attributes, data), "cudaPointerGetAttributes");
  SY_CHECK(attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged,
           "{} on rank {}: the {} ({}) is {}; the NCCL communicator moves device memory (device_memory() is true)",
           call, origin_rank_, what, data, memory_kind(attributes.type));
  SY_CHECK(attributes.type != cudaMemoryTypeDevice || attributes.device == device_,
           "{} on rank {}: the {} ({}) is memory of GPU {}, but this communicator runs on GPU {}", call, origin_rank_,
           what, data, attributes.device, device_);
}

void NcclCommunicator::fail(std::string&& message) {
  if (comm_ != nullptr) {
    // Abort ends the communicator's work in flight without waiting for peers; its status cannot add
    // anything to the error being raised.
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  failure_ = message;
  throw_error(std::move(message));
}

void NcclCommunicator::synchronize() {
  check_usable("synchronize");
  check_not_capturing("synchronize");
  const auto start = std::chrono::steady_clock::now();
  auto check_async = [&] {
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      fail(
          fmt::format("NCCL reported an asynchronous error on rank {} (rank {} of {} in this communicator, GPU {}): "
                      "{} (NCCL error {}){}{}; the communicator is aborted",
                      origin_rank_, rank_, size_, device_, ncclGetErrorString(async), static_cast<int>(async),
                      last != nullptr && *last != '\0' ? "; NCCL says: " : "", last != nullptr ? last : ""));
    }
  };
  for (int polls = 0;; ++polls) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) check_cuda(state, "cudaStreamQuery");
    check_async();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (wait_timeout_.count() > 0 && waited > wait_timeout_) {
      fail(
          fmt::format("rank {} (rank {} of {} in this communicator) waited {} ms for its stream, longer than the "
                      "{} ms limit (NcclOptions::wait_timeout); a peer may have failed or issued a different "
                      "collective; the communicator is aborted",
                      origin_rank_, rank_, size_, waited.count(), wait_timeout_.count()));
    }
    // Spin briefly (a barrier's latency), then stop burning the core.
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // An error can also end NCCL's work early, leaving the stream idle.
  check_async();
}

void NcclCommunicator::all_reduce_sum_impl(float* data, int64_t count) {
  check_usable("all_reduce_sum");
  if (count == 0) return;
  check_device_buffer(data, "all_reduce_sum", "buffer");
  check_nccl(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream_),
             "ncclAllReduce");
}

void NcclCommunicator::all_gather_impl(const void* send, void* recv, int64_t count, DType dtype) {
  check_usable("all_gather");
  if (count == 0) return;
  check_device_buffer(send, "all_gather", "send buffer");
  check_device_buffer(recv, "all_gather", "receive buffer");
  const NcclElements e = nccl_elements(dtype);
  check_nccl(ncclAllGather(send, recv, e.count(count), e.type, comm_, stream_), "ncclAllGather");
}

void NcclCommunicator::reduce_scatter_sum_impl(const float* send, float* recv, int64_t count) {
  check_usable("reduce_scatter_sum");
  if (count == 0) return;
  check_device_buffer(send, "reduce_scatter_sum", "send buffer");
  check_device_buffer(recv, "reduce_scatter_sum", "receive buffer");
  check_nccl(ncclReduceScatter(send, recv, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream_),
             "ncclReduceScatter");
}

void NcclCommunicator::all_to_all_v_impl(const void* send, std::span<const int64_t> send_counts,
                                         std::span<const int64_t> send_displs, void* recv,
                                         std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                                         DType dtype) {
  check_usable("all_to_all_v");
  const auto me = static_cast<size_t>(rank_);
  SY_CHECK(send_counts[me] == recv_counts[me], "all_to_all_v: rank {} sends {} elements to itself but expects {}",
           rank_, send_counts[me], recv_counts[me]);
  bool sends = false, receives = false;
  for (int r = 0; r < size_; ++r) {
    sends = sends || send_counts[static_cast<size_t>(r)] > 0;
    receives = receives || recv_counts[static_cast<size_t>(r)] > 0;
  }
  if (sends) check_device_buffer(send, "all_to_all_v", "send buffer");
  if (receives) check_device_buffer(recv, "all_to_all_v", "receive buffer");
  const size_t bytes = dtype_size(dtype);
  const NcclElements e = nccl_elements(dtype);
  const auto* src = static_cast<const char*>(send);
  auto* dst = static_cast<char*>(recv);
  // This rank's own block is a device copy; NCCL moves the others, all in one group.
  if (send_counts[me] > 0) {
    check_cuda(cudaMemcpyAsync(dst + static_cast<size_t>(recv_displs[me]) * bytes,
                               src + static_cast<size_t>(send_displs[me]) * bytes,
                               static_cast<size_t>(send_counts[me]) * bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync");
  }
  if (size_ == 1) return;
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  try {
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<size_t>(peer);
      if (peer == rank_) continue;
      if (send_counts[p] > 0) {
        check_nccl(ncclSend(src + static_cast<size_t>(send_displs[p]) * bytes, e.count(send_counts[p]), e.type, peer,
                            comm_, stream_),
                   "ncclSend");
      }
      if (recv_counts[p] > 0) {
        check_nccl(ncclRecv(dst + static_cast<size_t>(recv_displs[p]) * bytes, e.count(recv_counts[p]), e.type, peer,
                            comm_, stream_),
                   "ncclRecv");
      }
    }
  } catch (...) {
    // Close the group so that this thread's NCCL group state does not swallow later calls.
    ncclGroupEnd();
    throw;
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclCommunicator::send_impl(const void* data, int64_t count, DType dtype, int dest, int /*tag*/) {
  check_usable("send");
  if (count == 0) return;
  check_device_buffer(data, "send", "buffer");
  const NcclElements e = nccl_elements(dtype);
  check_nccl(ncclSend(data, e.count(count), e.type, dest, comm_, stream_), "ncclSend");
}

void NcclCommunicator::recv_impl(void* data, int64_t count, DType dtype, int source, int /*tag*/) {
  check_usable("recv");
  if (count == 0) return;
  check_device_buffer(data, "recv", "buffer");
  const NcclElements e = nccl_elements(dtype);
  check_nccl(ncclRecv(data, e.count(count), e.type, source, comm_, stream_), "ncclRecv");
}

void NcclCommunicator::broadcast_impl(void* data, int64_t count, DType dtype, int root) {
  check_usable("broadcast");
  if (count == 0) return;
  check_device_buffer(data, "broadcast", "buffer");
  const NcclElements e = nccl_elements(dtype);
  check_nccl(ncclBroadcast(data, data, e.count(count), e.type, root, comm_, stream_), "ncclBroadcast");
}

void NcclCommunicator::barrier_impl() {
  check_usable("barrier");
  check_not_capturing("barrier");
  check_nccl(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  synchronize();
}

std::unique_ptr<Communicator> NcclCommunicator::split_impl(std::span<const int> members) {
  check_usable("split");
  std::unique_ptr<Communicator> sub_bootstrap = bootstrap_->split(members);
  Communicator& sub = *sub_bootstrap;
  const NcclOptions options{.cuda_device = device_, .wait_timeout = wait_timeout_};
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(sub, std::move(sub_bootstrap), options, origin_rank_, own_stream_, stream_));
}

}  // namespace sy
