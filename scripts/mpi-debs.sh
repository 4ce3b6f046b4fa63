#!/usr/bin/env bash
# Fetches Open MPI's runtime (mpirun, libmpi and the libraries they load) into .mpi/ at the project's root,
# for a machine that has no Debian packages and no network (the GPU machine: shared/DEVICE.md), as
# shared/device/prepare.sh does the Vulkan loader's into .gl/. bench/ddp_bench.sh unpacks .mpi/*.deb there
# (dpkg -x; the mpirun symlink is an alternative dpkg -x does not make, so it calls mpirun.openmpi). Only
# Open MPI's own packages and the libraries it alone brings, not the base system's (libc, libstdc++, zlib).
# Run once, from the project's root.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .mpi /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
apt-get $o update >/dev/null
(cd .mpi && apt-get $o download openmpi-bin openmpi-common libopenmpi3 libpmix2 libevent-core-2.1-7 \
  libevent-pthreads-2.1-7 libfabric1 libhwloc15 libibverbs1 ibverbs-providers librdmacm1 libmunge2 libnl-3-200 \
  libnl-route-3-200 libnuma1 libpsm-infinipath1 libpsm2-2 libucx0 libxnvctrl0 libpciaccess0 libxml2 libicu72 \
  ocl-icd-libopencl1 >/dev/null)
ls .mpi
