// A TCP rendezvous for out-of-band collectives between processes that have
// no MPI (the demo, tests, `netfold run`-style launchers).
//
//   // Launcher:
//   auto server = *TcpOobServer::Start(/*size=*/8);      // 127.0.0.1, free port
//   setenv("NETFOLD_OOB_ADDRESS", server->address().c_str(), 1); ... spawn ranks
//   // Each rank:
//   auto oob = *TcpOob::Connect(address, rank, size);
//   oob->Barrier();
//
// The server collects one request from every rank for each operation, in
// rank order, checks they agree (same operation, same size, same root),
// and answers all; any disagreement, disconnect or timeout closes every
// connection, so every rank gets an error instead of hanging. Every socket
// read and write has a deadline (`timeout`).
//
// Thread-safety: a TcpOob is used by one thread; the server runs its own
// thread and is stopped by its destructor.
#ifndef NETFOLD_HOST_TCP_OOB_H_
#define NETFOLD_HOST_TCP_OOB_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/oob.h"

namespace netfold::host {

class TcpOobServer {
 public:
  // Listens on `bind_address` ("ip:port", port 0 = pick one) for `size`
  // ranks. The server ends when every rank said goodbye or on an error.
  static absl::StatusOr<std::unique_ptr<TcpOobServer>> Start(
      int size, const std::string& bind_address = "127.0.0.1:0",
      absl::Duration timeout = absl::Seconds(120));
  ~TcpOobServer();
  // "ip:port" to give to the ranks.
  const std::string& address() const { return address_; }
  // Waits up to `timeout` for the server to end; its outcome (OK if every
  // rank finished cleanly).
  absl::Status Wait(absl::Duration timeout);

 private:
  TcpOobServer() = default;
  void Serve();

  int listen_fd_ = -1;
  int size_ = 0;
  absl::Duration timeout_;
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  absl::Status result_;
};

class TcpOob : public Oob {
 public:
  static absl::StatusOr<std::unique_ptr<TcpOob>> Connect(
      const std::string& address, int rank, int size, absl::Duration timeout = absl::Seconds(120));
  // From NETFOLD_OOB_ADDRESS, NETFOLD_OOB_RANK, NETFOLD_OOB_SIZE.
  static absl::StatusOr<std::unique_ptr<TcpOob>> FromEnvironment();
  ~TcpOob() override;

  absl::Status Allgather(const void* send, void* recv, size_t bytes) override;
  absl::Status Bcast(void* buf, size_t bytes, int root) override;
  absl::Status Barrier() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // The callbacks of the C API backed by this object (ctx = this).
  netfold_oob_t callbacks();

 private:
  TcpOob(int fd, int rank, int size) : fd_(fd), rank_(rank), size_(size) {}
  absl::Status Exchange(uint8_t op, uint32_t root, const void* send, size_t send_bytes,
                        void* recv, size_t recv_bytes);

  int fd_;
  int rank_, size_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_TCP_OOB_H_
