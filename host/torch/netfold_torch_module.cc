// netfold_torch: the Python module that registers torch.distributed's
// backend "netfold" (docs/pytorch.md).
//
//   import netfold_torch                      # registers "netfold"
//   import torch.distributed as dist
//   dist.init_process_group("netfold")        # under torchrun, or env:// under mpirun
//   dist.all_reduce(torch.ones(4))
//   print(netfold_torch.stats()["ops_completed"])
//
// Importing it registers the creator with
// torch.distributed.Backend.register_backend("netfold", ..., extended_api=True)
// (torch then hands it each group's store, ranks and timeout), and an
// atexit handler that destroys the netfold groups still alive and leaves
// the fabric (FabricContext::Shutdown).
#include <torch/csrc/utils/pybind.h>

#include "host/torch/fabric_context.h"
#include "host/torch/process_group_netfold.h"

namespace py = pybind11;

namespace netfold::pytorch {
namespace {

py::dict StatsDict() {
  netfold_stats_t s;
  {
    py::gil_scoped_release no_gil;
    s = FabricContext::Stats();
  }
  py::dict d;
  d["ops_completed"] = s.ops_completed;
  d["ops_failed"] = s.ops_failed;
  d["chunks_posted"] = s.chunks_posted;
  d["repairs_sent"] = s.repairs_sent;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["link_tx_bytes"] = s.link_tx_bytes;
  d["link_rx_bytes"] = s.link_rx_bytes;
  d["retransmissions"] = s.retransmissions;
  d["packets_dropped"] = s.packets_dropped;
  d["host_ops"] = s.host_ops;
  d["failovers"] = s.failovers;
  return d;
}

}  // namespace
}  // namespace netfold::pytorch

PYBIND11_MODULE(netfold_torch, m) {
  using netfold::pytorch::FabricContext;
  using netfold::pytorch::ProcessGroupNetfold;
  m.doc() =
      "torch.distributed backend 'netfold': collectives on CPU tensors offloaded to a netfold "
      "fabric (docs/pytorch.md). Importing this module registers the backend.";
  m.def(
      "_create_process_group",
      [](const c10d::DistributedBackendOptions& options, const py::object& pg_options) {
        TORCH_CHECK(pg_options.is_none(),
                    "netfold: init_process_group/new_group take no pg_options for netfold "
                    "(configure it with NETFOLD_* environment variables, docs/pytorch.md)");
        py::gil_scoped_release no_gil;  // joining waits for the other ranks
        return ProcessGroupNetfold::Create(options);
      },
      "The creator torch.distributed calls for each netfold process group.");
  m.def("stats", &netfold::pytorch::StatsDict,
        "This rank's netfold counters since it joined (netfold_get_stats): ops_completed, "
        "host_ops (operations the hosts ran instead of the fabric), ...");
  m.def("_shutdown", &FabricContext::Shutdown, py::call_guard<py::gil_scoped_release>(),
        "Destroys the netfold groups still alive and leaves the fabric (run at exit).");
  py::module_::import("torch.distributed")
      .attr("Backend")
      .attr("register_backend")("netfold", m.attr("_create_process_group"),
                                py::arg("extended_api") = true);
  py::module_::import("atexit").attr("register")(m.attr("_shutdown"));
}
