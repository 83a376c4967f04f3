"""netfold-testbed: a netfold fabric in network namespaces (docs/testbed.md).

Builds, from the manager's own topology YAML, a namespace per host and per
switch, veth pairs for the links (optionally rate-limited with tc tbf), a
flat IPv4 data network that crosses the emulated switches and a management
bridge in the root namespace; starts netfold-managerd (root namespace) and
one netfold-switchd per switch namespace (DPDK net_af_packet or kernel-socket
backend); runs commands and MPI jobs in the host namespaces; tears it all
down again, also after a failure, Ctrl-C or a crash.

  netfold-testbed up deploy/topologies/testbed_two_level.yaml --backend dpdk
  netfold-testbed ping h0 h7
  netfold-testbed mpirun -- build/examples/mpi_allreduce
  netfold-testbed exec h3 ip addr
  netfold-testbed counters spine0
  netfold-testbed fault leaf0 drop=0.05,seed=3
  netfold-testbed status
  netfold-testbed down

Runs as root with /usr/bin/python3 (Debian's python3-yaml). Every wait has a
deadline; `down` is safe to run twice and after a crash (it removes what
carries the prefix's names, whether or not the state file survived).

The tool, by module (deploy/testbed/netfold-testbed runs cli.main):

  cli         the subcommands and their options; main()
  lifecycle   up (build, or tear down what was built) and down
  operations  status, exec, ping, counters, fault, mpirun
  topology    the topology file, --rate, and the plan of names and addresses
  network     namespaces, bridges, veths and tc qdiscs of a plan
  daemons     netfold-managerd and netfold-switchd: configs, start, query, stop
  state       the state directory: testbed.json, the credential
  netns       ip/tc commands, running Python inside a namespace, listings
  icmp        ICMP echo for ping
  errors      TestbedError, Interrupted, log
"""
