// The NCCL communicator (built with SY_WITH_NCCL): collectives between GPUs, one process per GPU,
// bootstrapped over a host communicator (MPI for a launch of several ranks, single-rank for one GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "parallel/communicator.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t (kept out of this header)

namespace sy {

struct NcclOptions {
  int cuda_device = 0;  // this process' GPU; made current on the calling thread
  // Longest host wait in synchronize() and barrier() before the communicator is aborted and the wait
  // throws. Zero waits without limit; NCCL's asynchronous errors (a peer's network failure) end a wait
  // either way. A limit must exceed the longest time ranks legitimately drift apart (loading weights).
  std::chrono::milliseconds wait_timeout{0};
};

// Semantics of Communicator, with these differences:
// - Buffers are device memory of this communicator's GPU (device_memory() is true); host memory is
//   refused with an sy::Error. Counts, displacements and other arguments are host values.
// - Every collective and send/recv is asynchronous: it returns once the work is enqueued on stream().
//   The buffers must stay valid and unchanged until the stream reaches the work; its results are
//   visible to work issued on stream() afterwards. Read them on the host only after synchronize() (or
//   another wait on that stream). send/recv "block" the stream, not the host: the pairing rule of the
//   interface (two ranks must not both send to each other first) still holds, per stream.
// - Tags are not transmitted: messages between two ranks match in the order they were issued.
// - A count mismatch between ranks (all_to_all_v counts that disagree, a recv of a different size than
//   its send) is not detected by NCCL: it hangs or corrupts data instead of raising an error.
// - barrier() and synchronize() block the host until stream() is idle, checking NCCL's asynchronous
//   error state while they wait; they cannot be captured into a CUDA graph (refused with an error).
//
// Streams: a communicator issues its work on its own non-blocking stream until set_stream() names
// another one. To order collectives with compute without host waits, and to capture them into a CUDA
// graph, set the caller's stream: NCCL work issued on a capturing stream is captured. Collectives are
// collective in capture too: every member captures the same ones, and replays the graph alike. Capturing
// all_to_all_v or send/recv to peers never exchanged with before needs cudaStreamCaptureModeThreadLocal
// (NCCL connects peers then); in cudaStreamCaptureModeGlobal, run the exchange once before capture.
// The counts of a captured all_to_all_v are fixed in the graph.
//
// split(members) builds a new NCCL communicator over the split of the bootstrap communicator (kept
// inside the child), so it is collective over the members only, as the interface says; ncclCommSplit
// would need every rank of the parent. Each split costs one NCCL initialisation and its buffers. A child
// shares its parent's own stream and starts issuing on the stream its parent issues on at that time:
// set_stream() on the world before splitting the groups of a layout puts every group on that stream. One
// stream for all of them runs the collectives of different communicators in the order every rank issued
// them; on separate streams, two ranks that issue them in different orders could deadlock.
//
// Destruction is collective over the members (ncclCommDestroy waits for its peers): destroy
// communicators in the same order on every rank, and destroy every CUDA graph that captured this
// communicator's work first. A communicator destroyed while an exception unwinds, or after an error, is
// aborted instead (ncclCommAbort, no waiting for peers). When a rank fails, end the launch
// (MpiSession::abort) rather than relying on destructors.
//
// Not thread-safe: one thread issues a communicator's calls.
class NcclCommunicator final : public Communicator {
 public:
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool device_memory() const override { return true; }
  int cuda_device() const { return device_; }

  // The stream the next call is issued on.
  cudaStream_t stream() const { return stream_; }
  // The communicator's own non-blocking stream (shared with the communicators split from it).
  cudaStream_t own_stream() const { return own_stream_.get(); }
  // Issue later calls on `stream` (of this communicator's GPU; it must outlive its use here). Not
  // collective. set_stream(own_stream()) goes back.
  void set_stream(cudaStream_t stream) { stream_ = stream; }

  // Blocks until stream() is idle. Throws (and aborts the communicator) when NCCL reports an
  // asynchronous error or the wait exceeds NcclOptions::wait_timeout. Not collective.
  void synchronize();
  void wait() override { synchronize(); }

 protected:
  void all_reduce_sum_impl(float* data, int64_t count) override;
  void all_gather_impl(const void* send, void* recv, int64_t count, DType dtype) override;
  void reduce_scatter_sum_impl(const float* send, float* recv, int64_t count) override;
  void all_to_all_v_impl(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                         void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                         DType dtype) override;
  void send_impl(const void* data, int64_t count, DType dtype, int dest, int tag) override;
  void recv_impl(void* data, int64_t count, DType dtype, int source, int tag) override;
  void broadcast_impl(void* data, int64_t count, DType dtype, int root) override;
  void barrier_impl() override;
  std::unique_ptr<Communicator> split_impl(std::span<const int> members) override;

 private:
  friend std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options);
  using StreamHandle = std::shared_ptr<std::remove_pointer_t<cudaStream_t>>;

  // Collective over `bootstrap`. A root communicator borrows it; a split child owns it.
  NcclCommunicator(Communicator& bootstrap, std::unique_ptr<Communicator> owned_bootstrap, const NcclOptions& options,
                   int origin_rank, StreamHandle own_stream, cudaStream_t stream);

  // Throws unless the communicator is usable (not aborted after an earlier failure).
  void check_usable(const char* call) const;
  void check_nccl(int status, const char* call) const;
  void check_cuda(cudaError_t status, const char* call) const;
  // Throws unless `data` is device memory of this GPU (skipped while the stream is being captured).
  void check_device_buffer(const void* data, const char* call, const char* what) const;
  void check_not_capturing(const char* call) const;
  // Aborts the NCCL communicator (no waiting for peers) and throws `message`; later calls throw it too.
  [[noreturn]] void fail(std::string&& message);  // by reference: see throw_error

  std::unique_ptr<Communicator> owned_bootstrap_;  // the bootstrap of a split child; null for a root
  Communicator* bootstrap_ = nullptr;              // host communicator over the same ranks, same order
  ncclComm* comm_ = nullptr;                       // null once aborted
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  int origin_rank_ = 0;  // rank in the root's bootstrap (the world rank of a launch): named in errors
  std::chrono::milliseconds wait_timeout_{0};
  StreamHandle own_stream_;
  cudaStream_t stream_ = nullptr;
  float* barrier_word_ = nullptr;  // f32 [1] on the device: barrier()'s all-reduce
  std::string failure_;            // why the communicator was aborted
};

// A communicator over the ranks of `bootstrap` (same ranks, same order), one GPU each. Collective over
// `bootstrap`, which must be a host communicator (MPI, single rank) and outlive the result. Rank 0 makes
// NCCL's unique id and broadcasts it through `bootstrap`. Makes options.cuda_device current.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options);

// Throws sy::Error "<call> failed on rank <rank>: <ncclGetErrorString> (NCCL error <status>)[; <detail>]"
// unless status is ncclSuccess (0).
void check_nccl_status(int status, std::string_view call, int rank, std::string_view detail = {});

}  // namespace sy
