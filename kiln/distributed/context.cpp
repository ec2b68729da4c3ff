#include <kiln/distributed/context.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>

#include <mpi.h>

#include <kiln/core/error.hpp>

namespace kiln::distributed {

struct Context::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests;  // started sums, until wait_all
};

namespace {

// Throws DistributedError for an MPI call that did not succeed (the communicator returns errors).
void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw DistributedError(std::string("kiln::distributed: ") + call + " failed: " +
                         (length > 0 ? std::string(text, static_cast<std::size_t>(length)) : "MPI error " + std::to_string(code)));
}

// MPI counts are ints: a larger buffer goes in pieces.
constexpr std::size_t kMaxCount = INT_MAX;

}  // namespace

Context::Context(int& argc, char**& argv) : mpi_(std::make_unique<Mpi>()) { start(&argc, &argv); }

Context::Context() : mpi_(std::make_unique<Mpi>()) { start(nullptr, nullptr); }

void Context::start(int* argc, char*** argv) {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    finalize_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      throw DistributedError("kiln::distributed: this MPI library does not support MPI_THREAD_FUNNELED (kiln's "
                             "thread pool runs beside the thread that calls MPI)");
    }
  }
  // kiln's own communicator: its collectives never pair with the program's, and its errors are returned.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &mpi_->comm), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(mpi_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(mpi_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(mpi_->comm, &size_), "MPI_Comm_size");
  mpi_->requests.reserve(64);
}

Context::~Context() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the program finalized MPI itself
  // Sums still pending (a rank left in the middle of a step) would wait for ranks that may never come.
  if (!mpi_->requests.empty()) abort(1);
  if (mpi_->comm != MPI_COMM_NULL) MPI_Comm_free(&mpi_->comm);
  if (finalize_) MPI_Finalize();
}

void Context::abort(int code) {
  MPI_Abort(mpi_->comm != MPI_COMM_NULL ? mpi_->comm : MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort returned: end this process at least
}

void Context::barrier() { check(MPI_Barrier(mpi_->comm), "MPI_Barrier"); }

std::string Context::library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  check(MPI_Get_library_version(text, &length), "MPI_Get_library_version");
  return std::string(text, static_cast<std::size_t>(length));
}

void Context::start_sum(void* data, std::size_t count, DType dtype) {
  if (!is_floating(dtype)) throw DTypeError(std::string("distributed sums are of float32 or float64, not ") + dtype_name(dtype));
  const MPI_Datatype type = dtype == DType::float64 ? MPI_DOUBLE : MPI_FLOAT;
  auto* bytes = static_cast<unsigned char*>(data);
  const std::size_t size = dtype_size(dtype);
  ++stats_.sums;
  stats_.bytes += count * size;
  for (std::size_t done = 0; done < count; done += kMaxCount) {
    const std::size_t piece = std::min(kMaxCount, count - done);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * size, static_cast<int>(piece), type, MPI_SUM, mpi_->comm, &request),
          "MPI_Iallreduce");
    mpi_->requests.push_back(request);
  }
}

void Context::progress() {
  if (mpi_->requests.empty()) return;
  int done = 0;
  check(MPI_Testall(static_cast<int>(mpi_->requests.size()), mpi_->requests.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
}

void Context::wait_all() {
  if (mpi_->requests.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  const int code =
      MPI_Waitall(static_cast<int>(mpi_->requests.size()), mpi_->requests.data(), MPI_STATUSES_IGNORE);
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  mpi_->requests.clear();
  check(code, "MPI_Waitall");
}

void Context::sum(double* data, std::size_t count) {
  for (std::size_t done = 0; done < count; done += kMaxCount)
    check(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(std::min(kMaxCount, count - done)), MPI_DOUBLE,
                        MPI_SUM, mpi_->comm),
          "MPI_Allreduce");
}

void Context::broadcast(void* data, std::size_t bytes, int root) {
  auto* from = static_cast<unsigned char*>(data);
  for (std::size_t done = 0; done < bytes; done += kMaxCount)
    check(MPI_Bcast(from + done, static_cast<int>(std::min(kMaxCount, bytes - done)), MPI_BYTE, root, mpi_->comm),
          "MPI_Bcast");
}

std::vector<std::uint64_t> Context::all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> values(static_cast<std::size_t>(size_));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, values.data(), 1, MPI_UINT64_T, mpi_->comm), "MPI_Allgather");
  return values;
}

}  // namespace kiln::distributed
